//===- CpuSupportsShim.cpp - __builtin_cpu_supports for clang 14 ----------===//
//
// See CpuSupportsShim.h. Compiled without that header, so the builtin below
// is the compiler's own.
//
//===----------------------------------------------------------------------===//
#include <cpuid.h>
#include <cstring>

namespace {
bool bit(unsigned leaf, unsigned sub, int reg, int n) {
  unsigned r[4] = {0, 0, 0, 0};
  if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3]))
    return false;
  return (r[reg] >> n) & 1;
}
enum { EAX, EBX, ECX, EDX };
} // namespace

extern "C" int modcFuzzCpuSupports(const char *name) {
  __builtin_cpu_init();
  if (!std::strcmp(name, "f16c"))
    return __builtin_cpu_supports("avx") && bit(1, 0, ECX, 29);
  if (!std::strcmp(name, "lzcnt"))
    return bit(0x80000001u, 0, ECX, 5);
  if (!std::strcmp(name, "movbe"))
    return bit(1, 0, ECX, 22);
  if (!std::strcmp(name, "avxvnni"))
    return __builtin_cpu_supports("avx2") && bit(7, 1, EAX, 4);
  if (!std::strcmp(name, "avx512fp16"))
    return __builtin_cpu_supports("avx512f") && bit(7, 0, EDX, 23);
#define KNOWN(f)                                                               \
  if (!std::strcmp(name, f))                                                   \
    return __builtin_cpu_supports(f);
  KNOWN("sse3") KNOWN("ssse3") KNOWN("sse4.1") KNOWN("sse4.2") KNOWN("popcnt")
  KNOWN("aes") KNOWN("pclmul") KNOWN("avx") KNOWN("avx2") KNOWN("fma")
  KNOWN("bmi") KNOWN("bmi2") KNOWN("avx512f") KNOWN("avx512cd")
  KNOWN("avx512bw") KNOWN("avx512dq") KNOWN("avx512vl") KNOWN("avx512ifma")
  KNOWN("avx512vbmi") KNOWN("avx512vbmi2") KNOWN("avx512vnni")
  KNOWN("avx512bitalg") KNOWN("avx512vpopcntdq") KNOWN("avx512bf16")
#undef KNOWN
  return 0;
}
