//===- Passes.td - mod to modk conversion -*- tablegen -*-===//

#ifndef MODC_CONVERSION_MODTOMODK_PASSES
#define MODC_CONVERSION_MODTOMODK_PASSES

include "mlir/Pass/PassBase.td"

def ConvertModToModk : Pass<"convert-mod-to-modk", "::mlir::ModuleOp"> {
  let summary = "Lower each mod.model to a modk.entry launch plan";
  let description = [{
    Tensors become workspace buffers ([B, static dims]); each mod op becomes
    the fused modk kernels that compute it, in execution order; parameters
    become `modk.param`; logits and routing masks become `modk.output`. The
    residual stream is updated in place where the tensor is dead afterwards.
    Requires mod-fuse-routing and mod-fuse-residual to have run.
  }];
  let dependentDialects = ["::modc::modk::ModkDialect",
                           "::mlir::memref::MemRefDialect"];
}

def GenerateGrad : Pass<"mod-generate-grad", "::mlir::ModuleOp"> {
  let summary = "Derive the training entry (loss and gradients) of each model";
  let description = [{
    Builds `modk.entry @grad` beside each fused mod.model: the forward pass in
    top-k mode that keeps every activation the backward pass reads (no
    in-place stream updates), the cross-entropy and causal-router losses, and
    the gradient kernels of every op in reverse order: dgrad/wgrad GEMMs on
    the gathered rows only, attention backward, the gate gradient
    dr = g'(r) <dy, f>, and scatter-add of the gathered rows' gradient; the
    gradient of skipped tokens passes through unchanged. Parameter gradients
    are the entry's `grad.<name>` outputs.
  }];
  let dependentDialects = ["::modc::modk::ModkDialect",
                           "::mlir::memref::MemRefDialect"];
}

def GenerateEval : Pass<"mod-generate-eval", "::mlir::ModuleOp"> {
  let summary = "Derive the loss-only entry (losses, no gradients) of each model";
  let description = [{
    Builds `modk.entry @eval` beside each fused mod.model: the forward pass of
    the training entry (tokens [B, S + 1], top-k, the same kernels in the same
    order) and its losses [total, ce, aux] by the loss-only kernels
    `modk.cross_entropy_loss` and `modk.bce_loss_value`, in the training
    entry's order, so that its losses equal @grad's bit for bit. No backward
    pass and no gradient buffers.
  }];
  let dependentDialects = ["::modc::modk::ModkDialect",
                           "::mlir::memref::MemRefDialect"];
}

def GenerateDecode : Pass<"mod-generate-decode", "::mlir::ModuleOp"> {
  let summary = "Derive the decode-step entry (sampling with KV caches)";
  let description = [{
    Builds `modk.entry @decode` beside each fused mod.model that can decode
    (dense, or MoD with a causal router): one token per sequence at its own
    position. Dense layers append every token's K and V to the layer's cache
    (`modk.decode_attention`); routed layers decide per sequence
    (`modk.decode_select`: router r > 0 for aux_loss, predictor p > 0 for
    predictor), compact the routed rows, run attention and MLP on those rows
    only and append only their K and V, so a routed layer's cache holds only
    routed tokens; the gated residual scatters back into the routed rows.
  }];
  let dependentDialects = ["::modc::modk::ModkDialect",
                           "::mlir::memref::MemRefDialect"];
}

#endif // MODC_CONVERSION_MODTOMODK_PASSES
