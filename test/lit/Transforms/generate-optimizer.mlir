// RUN: mod-opt %s --split-input-file --modk-generate-optimizer | FileCheck %s

// A training entry gets modk.optimizer @adamw over its parameters (with
// their decay flags), the decoupled AdamW update of one element as its
// body, in the order of docs/model-format.md, "Training".
// CHECK-LABEL: modk.entry @grad
// CHECK: modk.optimizer @adamw attributes {params = [#modk.param<name = "w", shape = [4, 4], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "norm", shape = [4], init = ones>]} {
// CHECK-NEXT: ^bb0(%p: f32, %g: f32, %m: f32, %v: f32, %grad_scale: f32, %decay: f32, %beta1: f32, %beta2: f32, %eps: f32, %step_size: f32, %inv_sqrt_bc2: f32):
// g' = g grad_scale
// CHECK-NEXT: %[[G:.*]] = arith.mulf %g, %grad_scale
// m' = beta1 m + (1 - beta1) g'
// CHECK-NEXT: %[[MK:.*]] = arith.mulf %beta1, %m
// CHECK-NEXT: %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: %[[OMB1:.*]] = arith.subf %[[ONE]], %beta1
// CHECK-NEXT: %[[MN:.*]] = arith.mulf %[[OMB1]], %[[G]]
// CHECK-NEXT: %[[M:.*]] = arith.addf %[[MK]], %[[MN]]
// v' = beta2 v + (1 - beta2) g' g'
// CHECK-NEXT: %[[VK:.*]] = arith.mulf %beta2, %v
// CHECK-NEXT: %[[ONE2:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NEXT: %[[OMB2:.*]] = arith.subf %[[ONE2]], %beta2
// CHECK-NEXT: %[[VN1:.*]] = arith.mulf %[[OMB2]], %[[G]]
// CHECK-NEXT: %[[VN:.*]] = arith.mulf %[[VN1]], %[[G]]
// CHECK-NEXT: %[[V:.*]] = arith.addf %[[VK]], %[[VN]]
// p' = p decay - step_size m' / (sqrt(v') inv_sqrt_bc2 + eps)
// CHECK-NEXT: %[[SQ:.*]] = math.sqrt %[[V]]
// CHECK-NEXT: %[[SC:.*]] = arith.mulf %[[SQ]], %inv_sqrt_bc2
// CHECK-NEXT: %[[DEN:.*]] = arith.addf %[[SC]], %eps
// CHECK-NEXT: %[[PD:.*]] = arith.mulf %p, %decay
// CHECK-NEXT: %[[NUM:.*]] = arith.mulf %step_size, %[[M]]
// CHECK-NEXT: %[[UPD:.*]] = arith.divf %[[NUM]], %[[DEN]]
// CHECK-NEXT: %[[P:.*]] = arith.subf %[[PD]], %[[UPD]]
// CHECK-NEXT: modk.yield %[[P]], %[[M]], %[[V]] : f32, f32, f32
// The squared gradient norm's term of an element: g * g in f64.
// CHECK-NEXT: } norm {
// CHECK-NEXT: ^bb0(%g: f32):
// CHECK-NEXT: %[[GD:.*]] = arith.extf %g : f32 to f64
// CHECK-NEXT: %[[SQ:.*]] = arith.mulf %[[GD]], %[[GD]] : f64
// CHECK-NEXT: modk.yield %[[SQ]] : f64
modk.entry @grad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 1, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 1, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "w", shape = [4, 4], init = normal, std = 2.000000e-02 : f64, decay = true>, #modk.param<name = "norm", shape = [4], init = ones>]} {
}

// -----

// No training entry (an inference-only package): no optimizer.
// CHECK-LABEL: modk.entry @forward
// CHECK-NOT: modk.optimizer
modk.entry @forward attributes {kind = #modk.entry_kind<forward>, model = #modk.model<name = "t", vocab_size = 1, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 1, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "norm", shape = [4], init = ones>]} {
}

// -----

// An optimizer that is there already stays the only one.
// CHECK-LABEL: modk.entry @grad
// CHECK: modk.optimizer @adamw
// CHECK: arith.addf %p, %g
// CHECK-NOT: modk.optimizer
modk.entry @grad attributes {kind = #modk.entry_kind<grad>, model = #modk.model<name = "t", vocab_size = 1, d_model = 32, n_layers = 1, n_heads = 2, d_ff = 64, seq_len = 1, mlp = swiglu, norm_eps = 1.000000e-05 : f64, rope_theta = 1.000000e+04 : f64, tie_embeddings = true, dtype = f32>, modes = [#modk.mode<topk>], params = [#modk.param<name = "norm", shape = [4], init = ones>]} {
}
modk.optimizer @adamw attributes {params = [#modk.param<name = "norm", shape = [4], init = ones>]} {
^bb0(%p: f32, %g: f32, %m: f32, %v: f32, %grad_scale: f32, %decay: f32, %beta1: f32, %beta2: f32, %eps: f32, %step_size: f32, %inv_sqrt_bc2: f32):
  %0 = arith.addf %p, %g : f32
  modk.yield %0, %m, %v : f32, f32, f32
} norm {
^bb0(%g: f32):
  %0 = arith.extf %g : f32 to f64
  modk.yield %0 : f64
}
