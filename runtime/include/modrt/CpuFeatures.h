//===- CpuFeatures.h - x86 features a CPU package may need ------*- C++ -*-===//
//
// One table serves both sides of the package boundary: modc records in a CPU
// package's manifest which of these features its `-march` turns on (read
// from the compiler's predefined macros), and the runtime refuses a package
// that needs one the CPU lacks, before loading any of its code
// (docs/internals.md, "manifest.json"). Header-only: modc includes it
// without linking modrt.
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_CPUFEATURES_H
#define MODRT_CPUFEATURES_H

#include <string>
#include <vector>

/// X(name, macro): the feature as GCC's and Clang's __builtin_cpu_supports
/// spell it, and the macro a compiler predefines when -march enables it.
#define MODRT_X86_CPU_FEATURES(X)                                              \
  X("sse3", "__SSE3__")                                                        \
  X("ssse3", "__SSSE3__")                                                      \
  X("sse4.1", "__SSE4_1__")                                                    \
  X("sse4.2", "__SSE4_2__")                                                    \
  X("popcnt", "__POPCNT__")                                                    \
  X("aes", "__AES__")                                                          \
  X("pclmul", "__PCLMUL__")                                                    \
  X("avx", "__AVX__")                                                          \
  X("avx2", "__AVX2__")                                                        \
  X("fma", "__FMA__")                                                          \
  X("f16c", "__F16C__")                                                        \
  X("bmi", "__BMI__")                                                          \
  X("bmi2", "__BMI2__")                                                        \
  X("lzcnt", "__LZCNT__")                                                      \
  X("movbe", "__MOVBE__")                                                      \
  X("avxvnni", "__AVXVNNI__")                                                  \
  X("avx512f", "__AVX512F__")                                                  \
  X("avx512cd", "__AVX512CD__")                                                \
  X("avx512bw", "__AVX512BW__")                                                \
  X("avx512dq", "__AVX512DQ__")                                                \
  X("avx512vl", "__AVX512VL__")                                                \
  X("avx512ifma", "__AVX512IFMA__")                                            \
  X("avx512vbmi", "__AVX512VBMI__")                                            \
  X("avx512vbmi2", "__AVX512VBMI2__")                                          \
  X("avx512vnni", "__AVX512VNNI__")                                            \
  X("avx512bitalg", "__AVX512BITALG__")                                        \
  X("avx512vpopcntdq", "__AVX512VPOPCNTDQ__")                                  \
  X("avx512bf16", "__AVX512BF16__")                                            \
  X("avx512fp16", "__AVX512FP16__")

namespace modrt {

struct CpuFeature {
  const char *name;  ///< as the manifest and __builtin_cpu_supports spell it
  const char *macro; ///< predefined by the compiler when -march enables it
};

/// Every feature a manifest may name, in a fixed order.
inline const std::vector<CpuFeature> &knownCpuFeatures() {
#define MODRT_FEATURE_ENTRY(name, macro) {name, macro},
  static const std::vector<CpuFeature> table = {
      MODRT_X86_CPU_FEATURES(MODRT_FEATURE_ENTRY)};
#undef MODRT_FEATURE_ENTRY
  return table;
}

/// Whether the CPU running this process has `name`; false for a name outside
/// the table, and for every name off x86.
inline bool cpuHasFeature(const std::string &name) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
#define MODRT_FEATURE_CHECK(feature, macro)                                    \
  if (name == feature)                                                         \
    return __builtin_cpu_supports(feature) != 0;
  MODRT_X86_CPU_FEATURES(MODRT_FEATURE_CHECK)
#undef MODRT_FEATURE_CHECK
#else
  (void)name;
#endif
  return false;
}

} // namespace modrt

#endif // MODRT_CPUFEATURES_H
