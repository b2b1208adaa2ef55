// The row kernels the kernel tests run (test/kernels, test/cuda_emu): named
// ops that modk-generalize turns into modk.rows, and that
// `mod-translate --modk-rows-to-cpp` / `--modk-rows-to-cuda` generate, as
// modc does for a package. Kernel n is modc_rows_<n>, in the order below;
// every op differs from the others in width or element type, so none is
// shared. RowKernels.h names them.
modk.entry @forward attributes {model = "{}", modes = ["topk"], params = [{init = "ones", name = "w96", shape = [96]}, {init = "ones", name = "w128", shape = [128]}, {init = "ones", name = "w90", shape = [90]}], seq_len = 1 : i64, vocab_size = 1 : i64} {
  %w96 = modk.param "w96" : memref<96xf32>
  %w128 = modk.param "w128" : memref<128xf32>
  %w90 = modk.param "w90" : memref<90xf32>
  %seg = modk.alloc : memref<?x1xi64>
  %x96 = modk.alloc : memref<?x1x96xf32>
  %x128 = modk.alloc : memref<?x1x128xf32>
  %x90 = modk.alloc : memref<?x1x90xf32>
  %a40 = modk.alloc : memref<?x1x40xf32>
  %b40 = modk.alloc : memref<?x1x40xbf16>
  %a33 = modk.alloc : memref<?x1x33xf32>
  %b33 = modk.alloc : memref<?x1x33xbf16>
  %a67 = modk.alloc : memref<?x1x67xf32>
  %b67 = modk.alloc : memref<?x1x67xbf16>
  %a50 = modk.alloc : memref<?x1x50xf32>
  %b50 = modk.alloc : memref<?x1x50xbf16>
  %a40b = modk.alloc : memref<?x2x40xf32>
  %b40b = modk.alloc : memref<?x2x40xbf16>
  %b90 = modk.alloc : memref<?x1x90xbf16>
  // 0, 1: RMSNorm (CpuKernels.RmsNorm; the parallel path, eps 1e-6).
  modk.rmsnorm %x96, %w96 rows %seg -> %x96 {eps = 1.000000e-05 : f64} : memref<?x1x96xf32>, memref<96xf32>, memref<?x1xi64>, memref<?x1x96xf32>
  modk.rmsnorm %x128, %w128 rows %seg -> %x128 {eps = 1.000000e-06 : f64} : memref<?x1x128xf32>, memref<128xf32>, memref<?x1xi64>, memref<?x1x128xf32>
  // 2, 3: swiglu's gradient into f32, into bf16 (N = 40).
  modk.activation_grad(%a40, %a40, %a40, %seg, %a40, %a40) {kind = #modk.activation<swiglu>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>} : memref<?x1x40xf32>, memref<?x1x40xf32>, memref<?x1x40xf32>, memref<?x1xi64>, memref<?x1x40xf32>, memref<?x1x40xf32>
  modk.activation_grad(%a40, %a40, %a40, %seg, %b40, %b40) {kind = #modk.activation<swiglu>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>} : memref<?x1x40xf32>, memref<?x1x40xf32>, memref<?x1x40xf32>, memref<?x1xi64>, memref<?x1x40xbf16>, memref<?x1x40xbf16>
  // 4, 5: gelu's gradient into f32, into bf16 (N = 33).
  modk.activation_grad(%a33, %a33, %seg, %a33) {kind = #modk.activation<gelu>, operandSegmentSizes = array<i32: 0, 1, 1, 1, 0, 1>} : memref<?x1x33xf32>, memref<?x1x33xf32>, memref<?x1xi64>, memref<?x1x33xf32>
  modk.activation_grad(%a33, %a33, %seg, %b33) {kind = #modk.activation<gelu>, operandSegmentSizes = array<i32: 0, 1, 1, 1, 0, 1>} : memref<?x1x33xf32>, memref<?x1x33xf32>, memref<?x1xi64>, memref<?x1x33xbf16>
  // 6, 7: RMSNorm and the residual add of D = 90 (CudaKernels.RmsnormAndAdd).
  modk.rmsnorm %x90, %w90 rows %seg -> %x90 {eps = 1.000000e-05 : f64} : memref<?x1x90xf32>, memref<90xf32>, memref<?x1xi64>, memref<?x1x90xf32>
  modk.add %x90, %x90 rows %seg -> %x90 : memref<?x1x90xf32>, memref<?x1x90xf32>, memref<?x1xi64>, memref<?x1x90xf32>
  // 8, 9: gelu into f32, into bf16 (N = 67).
  modk.activation(%a67, %seg, %a67) {kind = #modk.activation<gelu>} : memref<?x1x67xf32>, memref<?x1xi64>, memref<?x1x67xf32>
  modk.activation(%a67, %seg, %b67) {kind = #modk.activation<gelu>} : memref<?x1x67xf32>, memref<?x1xi64>, memref<?x1x67xbf16>
  // 10, 11: swiglu into f32, into bf16 (N = 50).
  modk.activation(%a50, %a50, %seg, %a50) {kind = #modk.activation<swiglu>} : memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1xi64>, memref<?x1x50xf32>
  modk.activation(%a50, %a50, %seg, %b50) {kind = #modk.activation<swiglu>} : memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1xi64>, memref<?x1x50xbf16>
  // 12-15: the activations' gradients of N = 50, into f32 and bf16.
  modk.activation_grad(%a50, %a50, %a50, %seg, %a50, %a50) {kind = #modk.activation<swiglu>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>} : memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1xi64>, memref<?x1x50xf32>, memref<?x1x50xf32>
  modk.activation_grad(%a50, %a50, %a50, %seg, %b50, %b50) {kind = #modk.activation<swiglu>, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>} : memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1xi64>, memref<?x1x50xbf16>, memref<?x1x50xbf16>
  modk.activation_grad(%a50, %a50, %seg, %a50) {kind = #modk.activation<gelu>, operandSegmentSizes = array<i32: 0, 1, 1, 1, 0, 1>} : memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1xi64>, memref<?x1x50xf32>
  modk.activation_grad(%a50, %a50, %seg, %b50) {kind = #modk.activation<gelu>, operandSegmentSizes = array<i32: 0, 1, 1, 1, 0, 1>} : memref<?x1x50xf32>, memref<?x1x50xf32>, memref<?x1xi64>, memref<?x1x50xbf16>
  // 16, 17: the residual add of D = 40, into f32 and bf16.
  modk.add %a40b, %a40b rows %seg -> %a40b : memref<?x2x40xf32>, memref<?x2x40xf32>, memref<?x1xi64>, memref<?x2x40xf32>
  modk.add %a40b, %a40b rows %seg -> %b40b : memref<?x2x40xf32>, memref<?x2x40xf32>, memref<?x1xi64>, memref<?x2x40xbf16>
  // 18: the add of D = 90 into bf16.
  modk.add %x90, %x90 rows %seg -> %b90 : memref<?x1x90xf32>, memref<?x1x90xf32>, memref<?x1xi64>, memref<?x1x90xbf16>
}
