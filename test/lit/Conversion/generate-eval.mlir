// RUN: mod-opt %s --split-input-file --mod-generate-eval | FileCheck %s
// RUN: mod-opt %s --split-input-file --mod-to-modk | FileCheck %s --check-prefix=PLAN

// The loss-only entry of a dense block followed by a routed one (k = 4 of 16,
// sigmoid gate, predictor router): the training entry's forward pass, then
// its losses in its order, and nothing of the backward pass. The model stays
// for the passes after it.
// CHECK: mod.model @small
// CHECK-LABEL: modk.entry @eval
// CHECK-SAME: modes = [#modk.mode<topk>]
// No gradient outputs: the parameters, then the tokens [B, S + 1].
// CHECK-NOT: "grad.
// CHECK: %[[T:.*]] = modk.input "tokens" : memref<?x17xi32>
// CHECK-NEXT: %[[IN:.*]] = modk.alloc
// CHECK-NEXT: %[[TGT:.*]] = modk.alloc
// CHECK-NEXT: modk.split_tokens(%[[T]], %[[IN]], %[[TGT]]) :
// CHECK-NEXT: %[[POS:.*]] = modk.alloc
// CHECK-NEXT: %[[SEG:.*]] = modk.alloc
// CHECK-NEXT: modk.identity_rows -> %[[POS]], %[[SEG]] :
// CHECK-NEXT: %[[X:.*]] = modk.alloc
// CHECK-NEXT: modk.embed %[[IN]], %{{.*}} -> %[[X]]
// The kernels of training's forward pass, in its order: pre-activations kept,
// the activation out of place.
// CHECK: modk.gemm {{.*}} {epilogue = #modk.epilogue<none>} : {{.*}}memref<?x16x64xf32>
// CHECK: modk.gemm {{.*}} {epilogue = #modk.epilogue<none>} : {{.*}}memref<?x16x64xf32>
// CHECK: modk.activation({{.*}}) {kind = #modk.activation<swiglu>}
// CHECK-NOT: epilogue = #modk.epilogue<swiglu>
// CHECK-NOT: epilogue = #modk.epilogue<residual_add>
// CHECK: modk.predictor %{{.*}} -> %[[P:[0-9]+]] :
// Top-k only, k rows a sequence, and a routing mask that is no output.
// CHECK: modk.rows ins(%[[X1:[0-9]+]], %{{.*}} : memref<?x16x32xf32>, memref<1x32xf32>) {{.*}} access(row, column -> row_value)
// CHECK: %[[MASK:[0-9]+]] = modk.alloc : memref<?x16xi32>
// CHECK-NEXT: modk.route_select %{{.*}} -> %{{.*}}, %{{.*}}, %[[MASK]] {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 1 : i64}
// CHECK: modk.rows ins(%[[X1]], {{.*}} outs({{.*}} : memref<?x4x32xf32>, memref<?x4x32xf32>) access(token, column -> row, row)
// CHECK: modk.gemm {{.*}} -> %[[EM:[0-9]+]] {epilogue = #modk.epilogue<none>} : memref<?x4x64xf32>
// CHECK: modk.copy(%[[X1]], %[[Y:[0-9]+]])
// CHECK-NEXT: modk.rows ins(%{{.*}}, %[[EM]], %{{.*}}, %[[Y]] : {{.*}}) {{.*}} outs(%[[Y]] : {{.*}}) access(row, row, token_value, token -> token)
// CHECK: modk.gemm {{.*}} -> %[[LOGITS:[0-9]+]] {epilogue = #modk.epilogue<none>} : {{.*}}memref<?x16x64xf32>
// The losses as @grad computes them: cross-entropy first, then the
// predictor's loss (weight 0.01, one routed layer), with no gradient.
// CHECK-NEXT: %[[L:.*]] = modk.output "losses" : memref<4xf32>
// CHECK-NEXT: modk.cross_entropy_loss(%[[LOGITS]], %[[TGT]], %[[L]])
// CHECK-NEXT: modk.bce_loss_value(%[[P]], %[[MASK]], %[[L]]) {n_routed = 1 : i64, weight = 1.000000e-02 : f64}
// CHECK-NEXT: }
// The loss of causal routing: the forward entry's pass in causal mode (room
// for every token in the routed rows) on the same [B, S + 1] tokens, and its
// cross-entropy alone.
// CHECK-LABEL: modk.entry @eval_causal
// CHECK-NOT: _grad
// CHECK: %[[CT:.*]] = modk.input "tokens" : memref<?x17xi32>
// CHECK: modk.split_tokens(%[[CT]], %{{.*}}, %[[CTGT:.*]]) :
// CHECK: modk.route_select %{{.*}} causal(%{{.*}}) -> {{.*}} {causal_router = #modk.causal_router<predictor>, k = 4 : i64, layer = 1 : i64}
// CHECK: modk.rows {{.*}} outs({{.*}} : memref<?x16x32xf32>, memref<?x16x32xf32>) access(token, column -> row, row)
// CHECK: %[[CL:.*]] = modk.output "losses" : memref<4xf32>
// CHECK-NEXT: modk.cross_entropy_loss(%{{.*}}, %[[CTGT]], %[[CL]])
// CHECK-NEXT: }
// CHECK-NOT: _grad
// CHECK-NOT: modk.zero

// In the pipeline the eval entries come last, with workspaces of their own.
// PLAN-LABEL: modk.entry @forward
// PLAN-LABEL: modk.entry @decode
// PLAN-LABEL: modk.entry @grad
// PLAN: modk.entry @eval attributes
// PLAN-SAME: workspace_bytes_per_sequence =
// PLAN-NOT: _grad
// The losses as row kernels (modk-generalize): the cross-entropy's (the
// row's maximum first) into losses[1] and [0], then the causal-router
// loss's into losses[2] and [0].
// PLAN: modk.zero(%[[L:[0-9]+]]) : memref<4xf32>
// PLAN-NEXT: %[[CE:.*]] = memref.subview %[[L]][1] [1] [1]
// PLAN-NEXT: %[[TOTAL:.*]] = memref.subview %[[L]][0] [1] [1]
// PLAN-NEXT: modk.rows ins({{.*}}) rows {{.*}} outs(%[[CE]], %[[TOTAL]] : {{.*}}) maxima {
// PLAN: %[[AUX:.*]] = memref.subview %[[L]][2] [1] [1]
// PLAN-NEXT: %[[TOTAL2:.*]] = memref.subview %[[L]][0] [1] [1]
// PLAN-NEXT: modk.rows ins({{.*}}) rows {{.*}} outs(%[[AUX]], %[[TOTAL2]] : {{.*}}) reduce {
// PLAN: modk.entry @eval_causal attributes
// PLAN-SAME: workspace_bytes_per_sequence =
// PLAN-NOT: _grad
// Causal routing has no causal-router loss: nothing adds into losses[2].
// PLAN: memref.subview %{{[0-9]+}}[1] [1] [1]
// PLAN: maxima {
// PLAN-NOT: [2] [1] [1]
// PLAN: // -----
module {
  mod.model @small attributes {aux_loss_weight = 1.000000e-02 : f64, capacity = 2.500000e-01 : f64, causal_router = #mod.causal_router<predictor>, d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<sigmoid>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 8 : i64, rope_theta = 1.000000e+04 : f64, schedule = #mod.schedule<every_other>, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
    %0 = mod.tokens : tensor<?x16xi32>
    %1 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
    %2 = mod.rmsnorm %1 {eps = 1.000000e-05 : f64, param = "blocks.0.attn_norm.weight"} : tensor<?x16x32xf32>
    %3 = mod.attention %2 {layer = 0 : i64} : tensor<?x16x32xf32>
    %4 = mod.add %1, %3 : tensor<?x16x32xf32>
    %5 = mod.rmsnorm %4 {eps = 1.000000e-05 : f64, param = "blocks.0.mlp_norm.weight"} : tensor<?x16x32xf32>
    %6 = mod.mlp %5 {layer = 0 : i64} : tensor<?x16x32xf32>
    %7 = mod.add %4, %6 : tensor<?x16x32xf32>
    %8 = mod.predictor %7 {hidden = 8 : i64, layer = 1 : i64} : (tensor<?x16x32xf32>) -> tensor<?x16xf32>
    %scores, %indices, %gathered, %normed = mod.route %7 causal(%8 : tensor<?x16xf32>) {causal_router = #mod.causal_router<predictor>, eps = 1.000000e-05 : f64, k = 4 : i64, layer = 1 : i64, norm_param = "blocks.1.attn_norm.weight"} : tensor<?x16x32xf32> -> tensor<?x16xf32>, tensor<?x4xi32>, tensor<?x4x32xf32>, tensor<?x4x32xf32>
    %9 = mod.attention %normed positions(%indices : tensor<?x4xi32>) {layer = 1 : i64} : tensor<?x4x32xf32>
    %10 = mod.add %gathered, %9 : tensor<?x4x32xf32>
    %11 = mod.rmsnorm %10 {eps = 1.000000e-05 : f64, param = "blocks.1.mlp_norm.weight"} : tensor<?x4x32xf32>
    %12 = mod.mlp_scatter %11, %9, %7, %scores, %indices {gate = #mod.gate<sigmoid>, layer = 1 : i64} : (tensor<?x4x32xf32>, tensor<?x4x32xf32>, tensor<?x16x32xf32>, tensor<?x16xf32>, tensor<?x4xi32>) -> tensor<?x16x32xf32>
    %13 = mod.rmsnorm %12 {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x16x32xf32>
    %14 = mod.lm_head %13 {param = "embed.weight"} : (tensor<?x16x32xf32>) -> tensor<?x16x64xf32>
    mod.return %14 : tensor<?x16x64xf32>
  }
}

// -----

// The aux_loss router's loss reads the router's scores.
// CHECK: mod.model @aux
// CHECK-LABEL: modk.entry @eval
// CHECK: modk.route_select %[[R:[0-9]+]] -> %{{.*}}, %{{.*}}, %[[MASK:[0-9]+]] {causal_router = #modk.causal_router<none>
// CHECK: %[[L:.*]] = modk.output "losses" : memref<4xf32>
// CHECK-NEXT: modk.cross_entropy_loss(%{{.*}}, %{{.*}}, %[[L]])
// CHECK-NEXT: modk.bce_loss_value(%[[R]], %[[MASK]], %[[L]]) {n_routed = 1 : i64, weight = 1.000000e-02 : f64}
// CHECK-NEXT: }
// CHECK-LABEL: modk.entry @eval_causal
// CHECK: modk.route_select {{.*}} {causal_router = #modk.causal_router<aux_loss>
// CHECK: modk.cross_entropy_loss
// CHECK-NEXT: }
// CHECK-NOT: _grad
// PLAN: modk.entry @eval attributes
// PLAN-NOT: _grad
// PLAN: memref.subview %{{[0-9]+}}[1] [1] [1]
// PLAN: maxima {
// PLAN: memref.subview %{{[0-9]+}}[2] [1] [1]
// PLAN: modk.entry @eval_causal attributes
// PLAN-NOT: _grad
// PLAN: memref.subview %{{[0-9]+}}[1] [1] [1]
// PLAN: maxima {
// PLAN-NOT: [2] [1] [1]
module {
  mod.model @aux attributes {aux_loss_weight = 1.000000e-02 : f64, capacity = 2.500000e-01 : f64, causal_router = #mod.causal_router<aux_loss>, d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<sigmoid>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 8 : i64, rope_theta = 1.000000e+04 : f64, schedule = #mod.schedule<every_other>, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
    %0 = mod.tokens : tensor<?x16xi32>
    %1 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
    %2 = mod.rmsnorm %1 {eps = 1.000000e-05 : f64, param = "blocks.0.attn_norm.weight"} : tensor<?x16x32xf32>
    %3 = mod.attention %2 {layer = 0 : i64} : tensor<?x16x32xf32>
    %4 = mod.add %1, %3 : tensor<?x16x32xf32>
    %5 = mod.rmsnorm %4 {eps = 1.000000e-05 : f64, param = "blocks.0.mlp_norm.weight"} : tensor<?x16x32xf32>
    %6 = mod.mlp %5 {layer = 0 : i64} : tensor<?x16x32xf32>
    %7 = mod.add %4, %6 : tensor<?x16x32xf32>
    %scores, %indices, %gathered, %normed = mod.route %7 {causal_router = #mod.causal_router<aux_loss>, eps = 1.000000e-05 : f64, k = 4 : i64, layer = 1 : i64, norm_param = "blocks.1.attn_norm.weight"} : tensor<?x16x32xf32> -> tensor<?x16xf32>, tensor<?x4xi32>, tensor<?x4x32xf32>, tensor<?x4x32xf32>
    %9 = mod.attention %normed positions(%indices : tensor<?x4xi32>) {layer = 1 : i64} : tensor<?x4x32xf32>
    %10 = mod.add %gathered, %9 : tensor<?x4x32xf32>
    %11 = mod.rmsnorm %10 {eps = 1.000000e-05 : f64, param = "blocks.1.mlp_norm.weight"} : tensor<?x4x32xf32>
    %12 = mod.mlp_scatter %11, %9, %7, %scores, %indices {gate = #mod.gate<sigmoid>, layer = 1 : i64} : (tensor<?x4x32xf32>, tensor<?x4x32xf32>, tensor<?x16x32xf32>, tensor<?x16xf32>, tensor<?x4xi32>) -> tensor<?x16x32xf32>
    %13 = mod.rmsnorm %12 {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x16x32xf32>
    %14 = mod.lm_head %13 {param = "embed.weight"} : (tensor<?x16x32xf32>) -> tensor<?x16x64xf32>
    mod.return %14 : tensor<?x16x64xf32>
  }
}
