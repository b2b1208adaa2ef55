//===- StoreBf16Activations.cpp - bf16 buffers for products ------*- C++
//-*-===//
//
// A bf16 model rounds both operands of every product to bf16
// (docs/model-format.md section 1: bf16 storage, f32 accumulation). Where a
// buffer is read only as the input of GEMMs, storing it as bf16 keeps exactly
// the values the GEMMs read, in half the bytes: the writer rounds as it stores
// instead of each reader rounding as it loads. Attention's queries, keys and
// values are bf16 values too (their products round them, round_bf16): where
// attention and the KV cache alone read them, they are stored as bf16 as well.
//
//===----------------------------------------------------------------------===//

#include "modc/Dialect/Modk/Transforms/BufferQueries.h"
#include "modc/Dialect/Modk/Transforms/Passes.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/TypeSwitch.h"

namespace modc {
#define GEN_PASS_DEF_STOREBF16ACTIVATIONS
#include "modc/Dialect/Modk/Transforms/Passes.h.inc"
} // namespace modc

using namespace mlir;
using namespace modc;

namespace {
enum class Use {
  ProductInput,   ///< read only as a product's operand, which rounds it
  AttentionInput, ///< read as attention's q, k or v, or by the KV cache:
                  ///< bf16 only where every write stores bf16 values
  RoundingWrite,  ///< written by a kernel that can round as it stores
  RoundedWrite,   ///< written with bf16 values (round_bf16): a rounding
                  ///< write that changes nothing
  Other,          ///< anything else: the buffer stays f32
};

Use classify(OpOperand &use) {
  Operation *op = use.getOwner();
  if (auto gemm = dyn_cast<modk::GemmOp>(op)) {
    if (&use == &gemm.getInputMutable())
      return Use::ProductInput;
    modk::Epilogue e = gemm.getEpilogue();
    // The queries and keys (RoPE's epilogue) and the values: rounded in the
    // epilogue, so a bf16 store keeps every bit. (Where the CUDA GEMM's tile
    // cannot hold RoPE, the emitter stages the f32 product in the entry's
    // scratch and the rotation stores bf16.)
    if (&use == &gemm.getOutputMutable() && gemm.getRoundBf16())
      return Use::RoundedWrite;
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
  // The kernels that read q, k and v (and the KV cache's appends, which
  // store them into a bf16 cache) take them as bf16 too, widening exactly.
  auto readsQkv = [&](auto attn) {
    return &use == &attn.getQMutable() || &use == &attn.getKMutable() ||
                   &use == &attn.getVMutable()
               ? Use::AttentionInput
               : Use::Other;
  };
  if (auto attn = dyn_cast<modk::AttentionOp>(op))
    if (&use != &attn.getOutputMutable())
      return readsQkv(attn);
  // Decode's attention rounds its output as it stores it, as attention
  // does (wo's product reads it).
  if (auto decode = dyn_cast<modk::DecodeAttentionOp>(op))
    return &use == &decode.getOutputMutable() ? Use::RoundingWrite
                                              : readsQkv(decode);
  if (auto append = dyn_cast<modk::CacheAppendOp>(op))
    return &use == &append.getKMutable() || &use == &append.getVMutable()
               ? Use::AttentionInput
               : Use::Other;
  // The gradients of the pre-activations, which the products of the gate
  // and up projections read.
  if (auto grad = dyn_cast<modk::ActivationGradOp>(op))
    return &use == &grad.getDupMutable() ||
                   (grad.getDgate() && &use == &grad.getDgateMutable()[0])
               ? Use::RoundingWrite
               : Use::Other;
  // Kernels that can round what they store into one output:
  // - the norms, attention's output (decode's above), training's
  //   out-of-place activation
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
        // In a bf16 model D = rowsum(dout * o) reads attention's output
        // rounded to bf16, as the O projection's products read it
        // (docs/model-format.md, "bf16 models").
        if (&use == &grad.getOMutable())
          return Use::ProductInput;
        Use input = readsQkv(grad);
        return input == Use::Other ? writes(grad.getDvMutable()) : input;
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

/// Whether `use` is a backward product's operand that the product rounds to
/// bf16: what classify() calls a product input of a modk.gemm_dgrad or
/// modk.gemm_wgrad of the entry's precision.
bool isRoundedBackwardOperand(OpOperand &use) {
  Operation *op = use.getOwner();
  if (!isa<modk::GemmDgradOp, modk::GemmWgradOp>(op) ||
      classify(use) != Use::ProductInput)
    return false;
  auto precision = op->getAttrOfType<modk::DTypeAttr>("precision");
  return !precision || precision.getValue() == DType::bf16;
}

/// product-copies: each f32 buffer that backward products read (and other
/// kernels too, or it would be bf16 already) gets a bf16 copy before the
/// first of them after each write, and those products read the copy until
/// the next write.
void copyBackwardOperands(Block &body, MLIRContext *ctx) {
  Type bf16 = BFloat16Type::get(ctx);
  SmallVector<modk::AllocOp> allocs(body.getOps<modk::AllocOp>());
  for (modk::AllocOp alloc : allocs) {
    Value buffer = alloc.getResult();
    auto type = cast<MemRefType>(buffer.getType());
    if (!type.getElementType().isF32())
      continue;
    SmallVector<OpOperand *> reads;
    for (OpOperand &use : buffer.getUses())
      if (isRoundedBackwardOperand(use) && use.getOwner()->getBlock() == &body)
        reads.push_back(&use);
    llvm::sort(reads, [](OpOperand *a, OpOperand *b) {
      return a->getOwner()->isBeforeInBlock(b->getOwner());
    });
    Operation *copiedAfter = nullptr; // the write the current copy holds
    Value copy;
    for (OpOperand *read : reads) {
      Operation *product = read->getOwner();
      Operation *writer = nullptr;
      for (Operation *op = product->getPrevNode(); op && !writer;
           op = op->getPrevNode())
        if (modk::mayWrite(op, buffer))
          writer = op;
      if (!writer)
        continue; // read before any write: leave it as it is
      if (writer != copiedAfter) {
        OpBuilder b(product);
        copy = modk::AllocOp::create(
            b, alloc.getLoc(), MemRefType::get(type.getShape(), bf16), nullptr);
        modk::CopyOp::create(b, product->getLoc(), buffer, copy);
        copiedAfter = writer;
      }
      read->set(copy);
    }
  }
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
    // In @grad, a buffer that a backward kernel reads unrounded (the
    // pre-activations; the gradients that flow on through the residual
    // stream) has another use and stays f32. Attention's output is not one:
    // attention_grad reads it rounded, as the O projection does.
    // A buffer that attention reads is bf16 only if every write stores
    // bf16 values: attention does not round what it reads.
    Block &body = entry.getBody().front();
    llvm::SmallPtrSet<Value, 16> chosen;
    for (auto alloc : body.getOps<modk::AllocOp>()) {
      MemRefType type = alloc.getType();
      if (!type.getElementType().isF32())
        continue;
      bool read = false, written = false, other = false;
      bool attentionRead = false, unroundedWrite = false;
      for (OpOperand &use : alloc->getUses()) {
        Use kind = classify(use);
        read |= kind == Use::ProductInput || kind == Use::AttentionInput;
        written |= kind == Use::RoundingWrite || kind == Use::RoundedWrite;
        other |= kind == Use::Other;
        attentionRead |= kind == Use::AttentionInput;
        unroundedWrite |= kind == Use::RoundingWrite;
      }
      if (read && written && !other && !(attentionRead && unroundedWrite))
        chosen.insert(alloc.getResult());
    }
    // An attention op's queries, keys and values are bf16 together or not
    // at all: where one of them stays f32 (written unrounded, or read by
    // another kernel), the others' bf16 copies would only add bytes on the
    // CPU, whose stacked Q, K, V product (modk-fuse-horizontal) then stays
    // live for the f32 one. A buffer dropped here may take another op's
    // with it: to a fixed point.
    for (bool changed = true; changed;) {
      changed = false;
      body.walk([&](Operation *op) {
        SmallVector<Value, 3> qkv;
        llvm::TypeSwitch<Operation *>(op)
            .Case<modk::AttentionOp, modk::AttentionGradOp,
                  modk::DecodeAttentionOp>([&](auto attn) {
              qkv = {attn.getQ(), attn.getK(), attn.getV()};
            })
            .Case([&](modk::CacheAppendOp append) {
              qkv = {append.getK(), append.getV()};
            });
        if (llvm::all_of(qkv, [&](Value v) { return chosen.contains(v); }))
          return;
        for (Value v : qkv)
          changed |= chosen.erase(v);
      });
    }
    Type bf16 = BFloat16Type::get(&getContext());
    for (Value buffer : chosen) {
      auto type = cast<MemRefType>(buffer.getType());
      buffer.setType(MemRefType::get(type.getShape(), bf16));
    }
    if (productCopies)
      copyBackwardOperands(body, &getContext());
  }
};
} // namespace
