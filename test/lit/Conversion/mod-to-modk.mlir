// RUN: mod-opt %s -split-input-file -verify-diagnostics --convert-mod-to-modk | FileCheck %s

// The launch plan of a dense block followed by a routed one (k = 4 of 16,
// predictor router: gathered buffers hold all 16 rows for causal mode).
// CHECK-LABEL: modk.entry @forward
// CHECK-SAME: modes = [#modk.mode<topk>, #modk.mode<causal>]
// CHECK-SAME: params = [#modk.param<name = "embed.weight", shape = [64, 32], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "blocks.0.attn_norm.weight", shape = [32], init = ones>
// CHECK-SAME: #modk.param<name = "blocks.1.predictor.fc1.bias", shape = [8], init = zeros>
// CHECK-SAME: #modk.param<name = "blocks.1.router.weight", shape = [1, 32], init = normal, std = 2.000000e-02 : f64, decay = true>
// CHECK-NOT: lm_head.weight
// CHECK: %[[EMB:.*]] = modk.param "embed.weight"
// CHECK: %[[TOK:.*]] = modk.input "tokens" : memref<?x16xi32>
// The identity row set (every token, in order) first: the embedding's
// rows (modk-generalize makes the lookup a row kernel over them).
// CHECK: modk.identity_rows -> %[[POS:.*]], %[[SEG:.*]] :
// CHECK: %[[X:.*]] = modk.alloc : memref<?x16x32xf32>
// CHECK: modk.embed %[[TOK]], %[[EMB]] -> %[[X]]
// Dense block: QKV with RoPE in the epilogue, attention; the O-projection
// and the down projection are plain GEMMs whose residual adds (in place on
// the stream) and the MLP's activation are kernels of their own here:
// folding them into the GEMMs is modk-fuse-epilogues' decision
// (Transforms/fuse-epilogues.mlir).
// CHECK: modk.rmsnorm %[[X]], %{{.*}} rows %[[SEG]] -> %[[N:.*]] {eps
// CHECK: modk.gemm %[[N]], [%{{.*}}] rows %[[SEG]] extra(%[[POS]]) -> %[[Q:.*]] {epilogue = #modk.epilogue<rope>, n_heads = 2 : i64
// CHECK: modk.gemm %[[N]], [%{{.*}}] rows %[[SEG]] extra(%[[POS]]) -> %[[K:.*]] {epilogue = #modk.epilogue<rope>
// CHECK: modk.gemm %[[N]], [%{{.*}}] rows %[[SEG]] -> %[[V:.*]] {epilogue = #modk.epilogue<none>}
// CHECK: modk.attention %[[Q]], %[[K]], %[[V]] rows %[[POS]], %[[SEG]] -> %[[O:[0-9]+]] {n_heads = 2 : i64}
// CHECK: modk.gemm %[[O]], [%{{.*}}] rows %[[SEG]] -> %[[OA:.*]] {epilogue = #modk.epilogue<none>}
// CHECK-NEXT: modk.add %[[X]], %[[OA]] rows %[[SEG]] -> %[[X]]
// CHECK: modk.gemm %[[N2:.*]], [%{{.*}}] rows %[[SEG]] -> %[[GP:.*]] {epilogue = #modk.epilogue<none>}
// CHECK-NEXT: modk.gemm %[[N2]], [%{{.*}}] rows %[[SEG]] -> %[[UP:.*]] {epilogue = #modk.epilogue<none>}
// CHECK-NEXT: modk.activation(%[[GP]], %[[UP]], %[[SEG]], %[[U:.*]]) {kind = #modk.activation<swiglu>}
// CHECK: modk.gemm %[[U]], [%{{.*}}] rows %[[SEG]] -> %[[M:.*]] {epilogue = #modk.epilogue<none>}
// CHECK-NEXT: modk.add %[[X]], %[[M]] rows %[[SEG]] -> %[[X]]
// Routed block.
// CHECK: modk.predictor %[[X]], [{{.*}}] scratch %{{.*}} -> %[[P:[0-9]+]] {causal_only} :
// The router is a kernel over every token (the identity rows): r = w . x,
// one sum a row, stored once a row. Then the selection, and one kernel
// that gathers the selected tokens and normalises them (mod.route's
// fusion), reading the stream at each row's token.
// CHECK: %[[R:.*]] = modk.alloc : memref<?x16xf32>
// CHECK-NEXT: modk.rows ins(%[[X]], %{{.*}} : memref<?x16x32xf32>, memref<1x32xf32>) rows %[[SEG]] : memref<?x1xi64> outs(%[[R]] : memref<?x16xf32>) access(row, column -> row_value) reduce {
// CHECK: %[[RPOS:.*]] = modk.alloc : memref<?x16xi32>
// CHECK-NEXT: %[[RSEG:.*]] = modk.alloc : memref<?x1xi64>
// CHECK-NEXT: %[[MASK:.*]] = modk.output "routed.1" : memref<?x16xi32>
// CHECK-NEXT: modk.route_select %[[R]] causal(%[[P]]) -> %[[RPOS]], %[[RSEG]], %[[MASK]] {causal_router = #modk.causal_router<predictor>, k = 4 : i64, layer = 1 : i64}
// CHECK-NEXT: %[[XS:.*]] = modk.alloc : memref<?x16x32xf32>
// CHECK-NEXT: %[[RN:.*]] = modk.alloc : memref<?x16x32xf32>
// CHECK-NEXT: modk.rows ins(%[[X]], %{{.*}} : memref<?x16x32xf32>, memref<32xf32>) rows %[[RSEG]] : memref<?x1xi64> tokens(%[[RPOS]] : memref<?x16xi32>) outs(%[[XS]], %[[RN]] : memref<?x16x32xf32>, memref<?x16x32xf32>) access(token, column -> row, row) reduce {
// CHECK: math.sqrt
// CHECK: modk.gemm %[[RN]], [%{{.*}}] rows %[[RSEG]] extra(%[[RPOS]]) -> %{{.*}} {epilogue = #modk.epilogue<rope>
// CHECK: modk.attention {{.*}} rows %[[RPOS]], %[[RSEG]] -> %[[RO:[0-9]+]] {n_heads = 2 : i64}
// CHECK: modk.gemm %[[RO]], [%{{.*}}] rows %[[RSEG]] -> %[[A:.*]] {epilogue = #modk.epilogue<none>}
// CHECK: modk.add %[[XS]], %[[A]] rows %[[RSEG]] -> %[[XS]]
// CHECK: modk.activation(%{{.*}}, %{{.*}}, %[[RSEG]], %[[RU:.*]]) {kind = #modk.activation<swiglu>}
// The gated scatter is a plain product into the block's rows m and a
// modk.rows that reads a, m, the score and the stream at the token and
// writes the stream there: x = x + sigmoid(r) (a + m).
// CHECK: modk.gemm %[[RU]], [%{{.*}}] rows %[[RSEG]] -> %[[M:[0-9]+]] {epilogue = #modk.epilogue<none>}
// CHECK-NEXT: modk.rows ins(%[[A]], %[[M]], %[[R]], %[[X]] : {{.*}}) rows %[[RSEG]] : memref<?x1xi64> tokens(%[[RPOS]] : {{.*}}) outs(%[[X]] : {{.*}}) access(row, row, token_value, token -> token)
// CHECK: modk.rmsnorm %[[X]]
// CHECK: %[[LOGITS:.*]] = modk.output "logits" : memref<?x16x64xf32>
// CHECK: modk.gemm %{{.*}}, [%[[EMB]]] rows %[[SEG]] -> %[[LOGITS]] {epilogue = #modk.epilogue<none>}
// CHECK-NOT: mod.
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

// Top-k only (causal_router none): gathered buffers hold k rows.
// CHECK-LABEL: modk.entry @forward
// CHECK-SAME: modes = [#modk.mode<topk>]
// CHECK: modk.route_select %{{.*}} -> {{.*}} {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 1 : i64} : memref<?x16xf32>, memref<?x4xi32>, memref<?x1xi64>, memref<?x16xi32>
// CHECK: modk.rows {{.*}} outs({{.*}} : memref<?x4x32xf32>, memref<?x4x32xf32>) access(token, column -> row, row)
module {
  mod.model @small attributes {aux_loss_weight = 1.000000e-02 : f64, capacity = 2.500000e-01 : f64, causal_router = #mod.causal_router<none>, d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<sigmoid>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 32 : i64, rope_theta = 1.000000e+04 : f64, schedule = #mod.schedule<every_other>, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
    %0 = mod.tokens : tensor<?x16xi32>
    %1 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
    %2 = mod.rmsnorm %1 {eps = 1.000000e-05 : f64, param = "blocks.0.attn_norm.weight"} : tensor<?x16x32xf32>
    %3 = mod.attention %2 {layer = 0 : i64} : tensor<?x16x32xf32>
    %4 = mod.add %1, %3 : tensor<?x16x32xf32>
    %5 = mod.rmsnorm %4 {eps = 1.000000e-05 : f64, param = "blocks.0.mlp_norm.weight"} : tensor<?x16x32xf32>
    %6 = mod.mlp %5 {layer = 0 : i64} : tensor<?x16x32xf32>
    %7 = mod.add %4, %6 : tensor<?x16x32xf32>
    %scores, %indices, %gathered, %normed = mod.route %7 {causal_router = #mod.causal_router<none>, eps = 1.000000e-05 : f64, k = 4 : i64, layer = 1 : i64, norm_param = "blocks.1.attn_norm.weight"} : tensor<?x16x32xf32> -> tensor<?x16xf32>, tensor<?x4xi32>, tensor<?x4x32xf32>, tensor<?x4x32xf32>
    %8 = mod.attention %normed positions(%indices : tensor<?x4xi32>) {layer = 1 : i64} : tensor<?x4x32xf32>
    %9 = mod.add %gathered, %8 : tensor<?x4x32xf32>
    %10 = mod.rmsnorm %9 {eps = 1.000000e-05 : f64, param = "blocks.1.mlp_norm.weight"} : tensor<?x4x32xf32>
    %11 = mod.mlp_scatter %10, %8, %7, %scores, %indices {gate = #mod.gate<sigmoid>, layer = 1 : i64} : (tensor<?x4x32xf32>, tensor<?x4x32xf32>, tensor<?x16x32xf32>, tensor<?x16xf32>, tensor<?x4xi32>) -> tensor<?x16x32xf32>
    %12 = mod.rmsnorm %11 {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x16x32xf32>
    %13 = mod.lm_head %12 {param = "embed.weight"} : (tensor<?x16x32xf32>) -> tensor<?x16x64xf32>
    mod.return %13 : tensor<?x16x64xf32>
  }
}

// -----

// The routed block's ops unfused (mod-fuse-routing and mod-fuse-residual
// off): the router's kernel, the selection, a gather that only copies, the
// attention norm as a kernel of its own over the gathered rows, the MLP's
// down projection and the sum a + m as plain kernels, and the gated
// residual reading that sum at the rows and writing the stream at the
// tokens.
// CHECK-LABEL: modk.entry @forward
// CHECK: modk.rows ins(%[[UX:.*]], %{{.*}} : memref<?x16x32xf32>, memref<1x32xf32>) rows %{{.*}} outs(%[[UR:.*]] : memref<?x16xf32>) access(row, column -> row_value)
// CHECK: modk.route_select %[[UR]] -> %[[UPOS:.*]], %[[USEG:.*]], %{{.*}} {causal_router = #modk.causal_router<none>, k = 4 : i64, layer = 1 : i64}
// CHECK-NEXT: %[[UXS:.*]] = modk.alloc : memref<?x4x32xf32>
// CHECK-NEXT: modk.rows ins(%[[UX]] : memref<?x16x32xf32>) rows %[[USEG]] : memref<?x1xi64> tokens(%[[UPOS]] : memref<?x4xi32>) outs(%[[UXS]] : memref<?x4x32xf32>) access(token -> row) reduce {
// CHECK: modk.rmsnorm %[[UXS]], %{{.*}} rows %[[USEG]] -> %[[UN:.*]] {eps
// CHECK: modk.attention {{.*}} rows %[[UPOS]], %[[USEG]]
// CHECK: modk.add %[[UXS]], %{{.*}} rows %[[USEG]] -> %[[UH:.*]] :
// CHECK: modk.gemm %{{.*}}, [%{{.*}}] rows %[[USEG]] -> %[[UM:.*]] {epilogue = #modk.epilogue<none>} : memref<?x4x64xf32>
// CHECK-NEXT: modk.add %{{.*}}, %[[UM]] rows %[[USEG]] -> %[[UF:[0-9]+]] :
// CHECK-NEXT: modk.rows ins(%[[UF]], %[[UR]], %[[UX]] : memref<?x4x32xf32>, memref<?x16xf32>, memref<?x16x32xf32>) rows %[[USEG]] : memref<?x1xi64> tokens(%[[UPOS]] : memref<?x4xi32>) outs(%[[UX]] : memref<?x16x32xf32>) access(row, token_value, token -> token)
// CHECK-NOT: mod.
module {
  mod.model @small attributes {aux_loss_weight = 1.000000e-02 : f64, capacity = 2.500000e-01 : f64, causal_router = #mod.causal_router<none>, d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, gate = #mod.gate<sigmoid>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, predictor_hidden = 32 : i64, rope_theta = 1.000000e+04 : f64, schedule = #mod.schedule<every_other>, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
    %0 = mod.tokens : tensor<?x16xi32>
    %1 = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
    %r = mod.router %1 {layer = 1 : i64} : (tensor<?x16x32xf32>) -> tensor<?x16xf32>
    %i = mod.topk %r {causal_router = #mod.causal_router<none>, k = 4 : i64} : tensor<?x16xf32> -> tensor<?x4xi32>
    %xs = mod.gather %1[%i] : (tensor<?x16x32xf32>, tensor<?x4xi32>) -> tensor<?x4x32xf32>
    %n = mod.rmsnorm %xs {eps = 1.000000e-05 : f64, param = "blocks.1.attn_norm.weight"} : tensor<?x4x32xf32>
    %a = mod.attention %n positions(%i : tensor<?x4xi32>) {layer = 1 : i64} : tensor<?x4x32xf32>
    %h = mod.add %xs, %a : tensor<?x4x32xf32>
    %hn = mod.rmsnorm %h {eps = 1.000000e-05 : f64, param = "blocks.1.mlp_norm.weight"} : tensor<?x4x32xf32>
    %m = mod.mlp %hn {layer = 1 : i64} : tensor<?x4x32xf32>
    %f = mod.add %a, %m : tensor<?x4x32xf32>
    %y = mod.gated_residual %1, %f, %r, %i {gate = #mod.gate<sigmoid>} : (tensor<?x16x32xf32>, tensor<?x4x32xf32>, tensor<?x16xf32>, tensor<?x4xi32>) -> tensor<?x16x32xf32>
    %2 = mod.rmsnorm %y {eps = 1.000000e-05 : f64, param = "final_norm.weight"} : tensor<?x16x32xf32>
    %3 = mod.lm_head %2 {param = "embed.weight"} : (tensor<?x16x32xf32>) -> tensor<?x16x64xf32>
    mod.return %3 : tensor<?x16x64xf32>
  }
}

// -----

// A top-k whose scores are not a router's has no layer to report its
// routing mask under.
module {
mod.model @unrouted attributes {d_ff = 64 : i64, d_model = 32 : i64, dtype = #mod.dtype<f32>, mlp = #mod.activation<swiglu>, n_heads = 2 : i64, n_layers = 2 : i64, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, seq_len = 16 : i64, tie_embeddings = true, vocab_size = 64 : i64} {
  %0 = mod.tokens : tensor<?x16xi32>
  %x = mod.embed %0 : (tensor<?x16xi32>) -> tensor<?x16x32xf32>
  %p = mod.predictor %x {hidden = 8 : i64, layer = 1 : i64} : (tensor<?x16x32xf32>) -> tensor<?x16xf32>
  // expected-error @+1 {{selects from scores that are not a mod.router's}}
  %i = mod.topk %p {causal_router = #mod.causal_router<none>, k = 4 : i64} : tensor<?x16xf32> -> tensor<?x4xi32>
}
}
