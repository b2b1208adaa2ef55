//===- Passes.td - Passes of the modc compiler --------------*- tablegen -*-===//

#ifndef MODC_TRANSFORMS_PASSES
#define MODC_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def ExpandSchedule : Pass<"mod-expand-schedule", "::modc::mod::ModelOp"> {
  let summary = "Decide which blocks are routed and give each its capacity";
  let description = [{
    Reads the model's `schedule` (`every_other`: layers 1, 3, 5, ...; `all`;
    `none`; or a list of layer indices) and its capacity, and annotates every
    routed `mod.block` with k = clamp(ceil(capacity * seq_len), 1, seq_len)
    (or `capacity_tokens`), its gate and its causal router.

    Before: `%1 = mod.block %0 {layer = 1 : i64} : ...`
    After:  `%1 = mod.block %0 {capacity = 2 : i64, causal_router = "predictor",
              gate = "linear", layer = 1 : i64} : ...`
  }];
  let dependentDialects = ["::modc::mod::ModDialect"];
}

def ExpandBlocks : Pass<"mod-expand-blocks", "::modc::mod::ModelOp"> {
  let summary = "Replace each mod.block by its components";
  let description = [{
    A dense block becomes rmsnorm, attention, add, rmsnorm, mlp, add. A routed
    block becomes router, (predictor,) topk, gather, rmsnorm, attention at the
    selected positions, add, rmsnorm, mlp, add and gated_residual.
  }];
  let dependentDialects = ["::modc::mod::ModDialect"];
}

def FuseRouting : Pass<"mod-fuse-routing", "::modc::mod::ModelOp"> {
  let summary = "Fuse router + top-k + gather + RMSNorm into mod.route";
  let description = [{
    rmsnorm(gather(x, topk(router(x)))) becomes one `mod.route` op: a single
    pass over the residual stream computes the router scores, selects k
    tokens per sequence, gathers them in position order and normalises them.
  }];
  let dependentDialects = ["::modc::mod::ModDialect"];
}

def FuseResidual : Pass<"mod-fuse-residual", "::modc::mod::ModelOp"> {
  let summary = "Fuse the gate scale and scatter into the MLP's last GEMM";
  let description = [{
    gated_residual(x, add(a, mlp(n)), r, idx) becomes `mod.mlp_scatter`: the
    down projection's epilogue writes x[idx] + g(r) * (a + m) into the
    residual stream in place; skipped tokens are never read or written.
  }];
  let dependentDialects = ["::modc::mod::ModDialect"];
}

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

def GenerateDecode : Pass<"mod-generate-decode", "::mlir::ModuleOp"> {
  let summary = "Derive the decode-step entry (sampling with KV caches)";
  let description = [{
    Builds `modk.entry @decode` beside each fused mod.model that can decode
    (dense, or MoD with a causal router): one token per sequence at its own
    position. Dense layers append every token's K and V to the layer's cache
    (`modk.decode_attention`); routed layers decide per sequence
    (`modk.decode_route`: router r > 0 for aux_loss, predictor p > 0 for
    predictor), compact the routed rows, run attention and MLP on those rows
    only and append only their K and V, so a routed layer's cache holds only
    routed tokens; the gated residual scatters back into the routed rows.
  }];
  let dependentDialects = ["::modc::modk::ModkDialect",
                           "::mlir::memref::MemRefDialect"];
}

def StoreBf16Activations : Pass<"modk-store-bf16", "::modc::modk::EntryOp"> {
  let summary = "Store the product operands of a bf16 model as bf16";
  let description = [{
    In a bf16 model every product rounds its operands to bf16, so a buffer
    that only products read holds bf16 values in f32 arrays. In all
    entries of a bf16 model, such a buffer becomes `memref<...xbf16>` (half
    the bytes, the same values) when every use reads it as a product operand
    (a `modk.gemm` input, the activations of a `modk.gemm_wgrad`) and every
    write can round as it stores: `modk.rmsnorm`, the normalised rows of
    `modk.route_select_gather` and `modk.decode_route`, a `modk.gemm` with
    epilogue `none`, `gelu` or `swiglu`, the output of `modk.attention` (not
    yet of `modk.decode_attention`, whose CUDA kernel keeps per-row data in
    it) and of `modk.activation`. Run before modk-plan-memory, which sizes
    buffers by their bytes.

    Before: `%4 = modk.alloc : memref<?x8x64xf32>` (written by
    `modk.gemm ... {epilogue = #modk.epilogue<swiglu>}`, read by the down
    projection)
    After:  `%4 = modk.alloc : memref<?x8x64xbf16>`

    It also decides which products round what they store: in a bf16 entry,
    a `modk.gemm` whose output is the queries, keys or values that
    attention reads (a rope epilogue, or an output `modk.attention` or
    `modk.decode_attention` reads as q, k or v) gets `round_bf16`, so the
    attention inputs and the KV cache hold bf16 values. That is the model's
    semantics, not a storage choice: it is made with `activations=false`
    too, and the emitters only print it.
  }];
  let options = [
    Option<"activations", "activations", "bool", /*default=*/"true",
           "Store the buffers only products read as bf16 (modc's "
           "--f32-activations sets false: every buffer stays f32, with the "
           "same values)">
  ];
}

def PlanMemory : Pass<"modk-plan-memory", "::modc::modk::EntryOp"> {
  let summary = "Place every workspace buffer, reusing memory by liveness";
  let description = [{
    Buffers whose live ranges (first to last kernel that touches them) do not
    overlap share memory: first-fit placement in three orders (first use,
    largest first, latest last use first), the smallest plan kept. Sets
    `offset` (bytes per sequence) on each `modk.alloc` and
    `workspace_bytes_per_sequence` on the entry.
  }];
}

#endif // MODC_TRANSFORMS_PASSES
