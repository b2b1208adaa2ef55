//===- FuseRowEpilogues.cpp - Generated row kernels into GEMMs --*- C++ -*-===//
//
// A modk.rows with no row sums is elementwise: each element it writes needs
// only the elements at the same row (or that row's token) and column. When
// such a kernel is the only reader of a plain GEMM's output and runs right
// after it, it can finish every element of the product where the product is
// computed (in registers on CUDA): the GEMM takes the kernel as its `rows`
// epilogue and the product is never stored. The first case is the routed
// block's gated scatter, x[token] += g(r[token]) * (a + m), which then runs
// in the down projection's epilogue (docs/model-format.md section 3,
// step 5).
//
// Not fused:
//  - a product with another reader (training keeps the down projection's
//    rows m for the backward pass);
//  - a kernel with row sums (RMSNorm): a GEMM tile holds part of a row;
//  - a kernel that writes what the GEMM reads, or writes a buffer it also
//    reads elsewhere than at the element it writes: other tiles of the
//    product may still be running.
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace modc {
#define GEN_PASS_DEF_FUSEROWEPILOGUES
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
/// The buffers `op` declares it reads (its memory effects).
llvm::SmallPtrSet<Value, 8> buffersRead(Operation *op) {
  SmallVector<MemoryEffects::EffectInstance> effects;
  cast<MemoryEffectOpInterface>(op).getEffects(effects);
  llvm::SmallPtrSet<Value, 8> read;
  for (const MemoryEffects::EffectInstance &e : effects)
    if (isa<MemoryEffects::Read>(e.getEffect()) && e.getValue())
      read.insert(e.getValue());
  return read;
}

/// Whether every buffer `rows` writes is safe to write from a GEMM's
/// epilogue over `gemm`'s operands: not read by the GEMM itself (by its
/// declared effects). `rows` reads an output it also reads only at the
/// element it writes: its verifier requires one access for both.
bool writesAreElementwise(modk::RowsOp rows, modk::GemmOp gemm) {
  llvm::SmallPtrSet<Value, 8> gemmReads = buffersRead(gemm);
  return llvm::none_of(rows.getOutputs(),
                       [&](Value out) { return gemmReads.contains(out); });
}

/// Moves the kernel after `gemm` into its `rows` epilogue where that is
/// safe; failure (nothing changed) otherwise. The kernel moves, so this is
/// a rewrite over a list of GEMMs taken first, not a walk's pattern.
LogicalResult fuseRowsIntoGemm(modk::GemmOp gemm, bool ownRows,
                               RewriterBase &rewriter) {
    if (gemm.getEpilogue() != modk::Epilogue::none || gemm.getRoundBf16() ||
        gemm.getConfig())
      return failure(); // not a plain f32 product
    Value product = gemm.getOutput();
    auto alloc = product.getDefiningOp<modk::AllocOp>();
    if (!alloc || !alloc.getType().getElementType().isF32())
      return failure();
    auto rows = dyn_cast_or_null<modk::RowsOp>(modk::kernelAfter(gemm));
    if (!rows || rows.getNumReductions() != 0 || rows.getNumMaxima() != 0 ||
        rows.getSegments() != gemm.getSegments() ||
        rows.getOutputs().size() != 1 || rows.hasRowSums())
      return failure(); // not an elementwise modk.rows on its rows
    if (!ownRows && !rows.hasTokenOperands())
      return failure(); // written at its own rows: left as a kernel
    if (rows.getCausalOnly() != gemm.getCausalOnly())
      return failure(); // one of them may not run
    // The product is read once by the kernel, at its row, and by nothing
    // else.
    unsigned productInput = 0, reads = 0;
    for (auto [j, in] : llvm::enumerate(rows.getInputs()))
      if (in == product) {
        productInput = j;
        ++reads;
      }
    if (reads != 1 || rows.isTokenOperand(productInput) ||
        llvm::is_contained(rows.getOutputs(), product))
      return failure();
    for (Operation *user : product.getUsers())
      if (user != gemm && user != rows)
        return failure(); // another reader keeps the product in memory
    if (!writesAreElementwise(rows, gemm))
      return failure();

    rewriter.setInsertionPoint(rows);
    auto fused = modk::GemmOp::create(
        rewriter, gemm.getLoc(), gemm.getInput(), gemm.getWeights(),
        gemm.getSegments(), ValueRange{}, rows.getOutputs()[0],
        modk::Epilogue::rows, gemm.getPrecisionAttr(), gemm.getCausalOnly());
    Block *block = rewriter.createBlock(&fused.getFusedRows(), {},
                                        {product.getType()}, {gemm.getLoc()});
    rewriter.moveOpBefore(rows, block, block->end());
    rewriter.modifyOpInPlace(rows, [&] {
      rows.getInputsMutable()[productInput].set(block->getArgument(0));
    });
    rewriter.eraseOp(gemm);
    if (alloc->use_empty())
      rewriter.eraseOp(alloc);
    return success();
}

struct FuseRowEpiloguesPass
    : public modc::impl::FuseRowEpiloguesBase<FuseRowEpiloguesPass> {
  using FuseRowEpiloguesBase::FuseRowEpiloguesBase;
  void runOnOperation() override {
    if (!enabled)
      return;
    SmallVector<modk::GemmOp> gemms(
        getOperation().getBody().front().getOps<modk::GemmOp>());
    IRRewriter rewriter(&getContext());
    for (modk::GemmOp gemm : gemms)
      (void)fuseRowsIntoGemm(gemm, ownRows, rewriter);
  }
};
} // namespace
