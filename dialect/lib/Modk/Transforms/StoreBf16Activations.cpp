//===- StoreBf16Activations.cpp - bf16 buffers for products ------*- C++ -*-===//
//
// A bf16 model rounds both operands of every product to bf16
// (docs/model-format.md section 1: bf16 storage, f32 accumulation). Where a
// buffer is read only as the input of GEMMs, storing it as bf16 keeps exactly
// the values the GEMMs read, in half the bytes: the writer rounds as it stores
// instead of each reader rounding as it loads.
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/TypeSwitch.h"

namespace modc {
#define GEN_PASS_DEF_STOREBF16ACTIVATIONS
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
enum class Use {
  ProductInput, ///< read only as a product's operand, which rounds it
  RoundingWrite, ///< written by a kernel that can round as it stores
  Other,         ///< anything else: the buffer stays f32
};

Use classify(OpOperand &use) {
  Operation *op = use.getOwner();
  if (auto gemm = dyn_cast<modk::GemmOp>(op)) {
    if (&use == &gemm.getInputMutable())
      return Use::ProductInput;
    modk::Epilogue e = gemm.getEpilogue();
    if (&use == &gemm.getOutputMutable() &&
        (e == modk::Epilogue::none || e == modk::Epilogue::gelu || e == modk::Epilogue::swiglu))
      return Use::RoundingWrite;
    return Use::Other;
  }
  // The backward products: the input gradient reads the output gradient
  // (times the weight), the weight gradient reads it and the activations.
  if (auto dgrad = dyn_cast<modk::GemmDgradOp>(op))
    return &use == &dgrad.getDyMutable() ? Use::ProductInput : Use::Other;
  if (auto wgrad = dyn_cast<modk::GemmWgradOp>(op))
    return &use == &wgrad.getInputMutable() || &use == &wgrad.getDyMutable()
               ? Use::ProductInput
               : Use::Other;
  auto writes = [&](OpOperand &output) {
    return &use == &output ? Use::RoundingWrite : Use::Other;
  };
  // The gradients of the pre-activations, which the products of the gate
  // and up projections read.
  if (auto grad = dyn_cast<modk::ActivationGradOp>(op))
    return &use == &grad.getDupMutable() ||
                   (grad.getDgate() && &use == &grad.getDgateMutable()[0])
               ? Use::RoundingWrite
               : Use::Other;
  // Kernels that can round what they store into one output:
  // - the norms, attention's output, training's out-of-place activation
  //   (the GEMM keeps the pre-activation), the routed rows' normalised copy;
  // - the values' gradient, and the queries' and keys' once rope_grad has
  //   rotated them (attention_grad's dq and dk, which rope_grad reads, stay
  //   f32);
  // - the residual stream's gradient as the output projections read it: a
  //   dense block's branch copy and a routed block's out-of-place sum of its
  //   two paths;
  // - the logits' gradient, which the LM head's products read.
  return llvm::TypeSwitch<Operation *, Use>(op)
      .Case<modk::RMSNormOp, modk::AttentionOp, modk::ActivationOp,
            modk::RopeGradOp, modk::CopyOp, modk::AddOp>(
          [&](auto typed) { return writes(typed.getOutputMutable()); })
      .Case([&](modk::RowsOp rows) {
        // An element-wise store at the kernel's rows (the routed rows'
        // normalised copy).
        unsigned begin = rows.getOutputs().getBeginOperandIndex();
        unsigned index = use.getOperandNumber();
        if (index < begin || index >= begin + rows.getOutputs().size())
          return Use::Other;
        return rows.getOutputAccessAt(index - begin) == modk::Access::row
                   ? Use::RoundingWrite
                   : Use::Other;
      })
      .Case([&](modk::AttentionGradOp grad) {
        return writes(grad.getDvMutable());
      })
      .Case([&](modk::CrossEntropyOp ce) {
        return writes(ce.getDlogitsMutable());
      })
      .Default([](Operation *) { return Use::Other; });
}

/// Whether a bf16 entry rounds `gemm`'s output as it stores it: the queries
/// and keys (rope epilogue) and the values, which attention and the KV cache
/// read as bf16 values.
bool roundsAttentionInput(modk::GemmOp gemm) {
  if (gemm.getEpilogue() == modk::Epilogue::rope)
    return true;
  Value buffer = gemm.getOutput();
  auto isQkv = [&](auto attn) {
    return buffer == attn.getQ() || buffer == attn.getK() ||
           buffer == attn.getV();
  };
  return llvm::any_of(buffer.getUsers(), [&](Operation *user) {
    return llvm::TypeSwitch<Operation *, bool>(user)
        .Case<modk::AttentionOp, modk::DecodeAttentionOp>(
            [&](auto attn) { return isQkv(attn); })
        .Default([](Operation *) { return false; });
  });
}

struct StoreBf16ActivationsPass
    : public modc::impl::StoreBf16ActivationsBase<StoreBf16ActivationsPass> {
  using StoreBf16ActivationsBase::StoreBf16ActivationsBase;

  void runOnOperation() override {
    modk::EntryOp entry = getOperation();
    if (!entry.isBf16())
      return;
    for (auto gemm : entry.getBody().front().getOps<modk::GemmOp>())
      if (roundsAttentionInput(gemm))
        gemm.setRoundBf16(true);
    if (!activations)
      return;
    // In @grad, a buffer that a backward kernel reads (attention's output,
    // which attention_grad reads; the pre-activations; the gradients that
    // flow on through the residual stream) has another use and stays f32.
    Type bf16 = BFloat16Type::get(&getContext());
    for (auto alloc : entry.getBody().front().getOps<modk::AllocOp>()) {
      MemRefType type = alloc.getType();
      if (!type.getElementType().isF32())
        continue;
      bool read = false, written = false, other = false;
      for (OpOperand &use : alloc->getUses()) {
        Use kind = classify(use);
        read |= kind == Use::ProductInput;
        written |= kind == Use::RoundingWrite;
        other |= kind == Use::Other;
      }
      if (read && written && !other)
        alloc.getResult().setType(MemRefType::get(type.getShape(), bf16));
    }
  }
};
} // namespace
