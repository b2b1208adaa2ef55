//===- ModkDialect.td - The kernel-level MoD dialect -------*- tablegen -*-===//
//
// `modk` is what will run: entry functions made of fused kernels over
// buffers with static per-sequence shapes, and the memory plan that places
// every buffer in one workspace.
//
//===----------------------------------------------------------------------===//

#ifndef MODC_DIALECT_MODK_DIALECT
#define MODC_DIALECT_MODK_DIALECT

include "mlir/IR/OpBase.td"

def Modk_Dialect : Dialect {
  let name = "modk";
  let summary = "Kernel-level Mixture-of-Depths dialect";
  let description = [{
    Buffers are memrefs whose leading dimension is the batch (dynamic) and
    whose other dimensions are static. Rows of gathered buffers are counted at
    run time by a segments buffer (`seg[b]` = first row of sequence b), so one
    plan serves top-k routing (k rows a sequence) and causal routing (a
    varying number).
  }];
  let cppNamespace = "::modc::modk";
  // modk.rows regions are arith and math ops.
  let dependentDialects = ["::mlir::memref::MemRefDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
  let useDefaultAttributePrinterParser = 1;
}

class Modk_Op<string mnemonic, list<Trait> traits = []>
    : Op<Modk_Dialect, mnemonic, traits>;

#endif // MODC_DIALECT_MODK_DIALECT
