//===- SanitizerOptions.cpp - ASan defaults of the libFuzzer targets -----===//
//
// intercept_tls_get_addr=0: the __tls_get_addr interceptor of clang 14's
// sanitizer runtime (and GCC's up to 13) takes a dynamic TLS block that
// malloc happened to place 16 bytes into a page for one with a pre-2.25
// glibc header, and reads a bogus range from the words before it. At exit
// LeakSanitizer's tracer then dies of SIGSEGV ("Tracer caught signal 11")
// and the run fails with no leak found: one fuzz_tokens run in this
// project's CI-like runs did. Without the interceptor the blocks stay
// reachable through glibc's own pointers, so leaks are still found
// (docs/testing.md, "Sanitizers"). ASAN_OPTIONS still overrides this.
//
//===----------------------------------------------------------------------===//

extern "C" const char *__asan_default_options() {
  return "intercept_tls_get_addr=0";
}
