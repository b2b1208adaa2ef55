//===- Passes.td - Transforms of the mod dialect -*- tablegen -*-===//

#ifndef MODC_DIALECT_MOD_TRANSFORMS_PASSES
#define MODC_DIALECT_MOD_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def ExpandSchedule : Pass<"mod-expand-schedule", "::modc::mod::ModelOp"> {
  let summary = "Decide which blocks are routed and give each its capacity";
  let description = [{
    Reads the model's `schedule` (`every_other`: layers 1, 3, 5, ...; `all`;
    `none`; or `layers`: the indices in `routed_layers`) and its capacity,
    and annotates every routed `mod.block` with k = clamp(ceil(capacity *
    seq_len), 1, seq_len) (or `capacity_tokens`, clamped the same way), its
    gate and its causal router.

    Before: `%1 = mod.block %0 {layer = 1 : i64} : ...`
    After:  `%1 = mod.block %0 {capacity = 2 : i64, causal_router =
              #mod.causal_router<predictor>, gate = #mod.gate<linear>,
              layer = 1 : i64} : ...`
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
    rmsnorm(gather(x, topk(router(x)))) becomes one `mod.route` op. The
    lowering writes it as the router's kernel over every token, the
    selection, and one kernel that gathers the selected tokens in position
    order and normalises them as it copies them; unfused, the gather and
    the norm are two kernels, and the norm reads the gathered rows again.
    `enabled=false` (modc `--no-fuse=routing`) leaves the ops alone: the
    lowering takes each of them.
  }];
  let options = [
    Option<"enabled", "enabled", "bool", /*default=*/"true",
           "Fuse each routed block's routing chain">
  ];
  let dependentDialects = ["::modc::mod::ModDialect"];
}

def FuseResidual : Pass<"mod-fuse-residual", "::modc::mod::ModelOp"> {
  let summary = "Fuse the gate scale and scatter into the MLP's last GEMM";
  let description = [{
    gated_residual(x, add(a, mlp(n)), r, idx) becomes `mod.mlp_scatter`:
    the lowering writes the down projection into the block's rows m and one
    kernel that adds x[idx] + g(r) * (a + m) into the residual stream in
    place (which modk-fuse-row-epilogues may make the product's epilogue);
    skipped tokens are never read or written. Unfused, the sum a + m is a
    kernel of its own, and the gated residual reads it.
    add(h, moe(n)) becomes `mod.moe %n residual(%h)`: the experts' rows are
    added into h's rows, and tokens that no expert keeps are never touched.
    `enabled=false` (modc `--no-fuse=residual`) leaves the ops alone.
  }];
  let options = [
    Option<"enabled", "enabled", "bool", /*default=*/"true",
           "Fuse each routed block's MLP and sum into its gated residual">
  ];
  let dependentDialects = ["::modc::mod::ModDialect"];
}

#endif // MODC_DIALECT_MOD_TRANSFORMS_PASSES
