//===- CpuSupportsShim.h - __builtin_cpu_supports for clang 14 --*- C++ -*-===//
//
// Clang 14 (the clang of Debian 12, which has libFuzzer) refuses five of the
// feature names that runtime/include/modrt/CpuFeatures.h passes to
// __builtin_cpu_supports (f16c, lzcnt, movbe, avxvnni, avx512fp16; GCC 12
// and clang 16 know them). The fuzz sub-build force-includes this header
// into the runtime sources so that they compile; CpuSupportsShim.cpp answers
// those five from CPUID and the rest from the builtin.
//
//===----------------------------------------------------------------------===//
#ifndef MODC_TEST_FUZZ_CPUSUPPORTSSHIM_H
#define MODC_TEST_FUZZ_CPUSUPPORTSSHIM_H
#ifdef __cplusplus
extern "C"
#endif
    int
    modcFuzzCpuSupports(const char *name);
#define __builtin_cpu_supports(name) modcFuzzCpuSupports(name)
#endif // MODC_TEST_FUZZ_CPUSUPPORTSSHIM_H
