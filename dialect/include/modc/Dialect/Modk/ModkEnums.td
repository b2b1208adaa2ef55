//===- ModkEnums.td - Kernel choices of modk ops ------------*- tablegen -*-===//
//
// The choices that only the kernel level makes: a GEMM's epilogue, a CUDA
// GEMM's kernel family, what an entry computes, the routing modes it serves,
// how a parameter starts and how a row kernel reads or writes each operand. Their C++ enums are generated from this file alone
// (ModkEnums.h.inc); the model's choices come from ModelChoices.td.
//
//===----------------------------------------------------------------------===//

#ifndef MODC_DIALECT_MODK_ENUMS
#define MODC_DIALECT_MODK_ENUMS

include "mlir/IR/EnumAttr.td"

def Modk_Epilogue : I32EnumAttr<"Epilogue", "what a GEMM does to its rows before storing them", [
  I32EnumAttrCase<"none", 0>,
  I32EnumAttrCase<"rope", 1>,
  I32EnumAttrCase<"residual_add", 2>,
  I32EnumAttrCase<"swiglu", 3>,
  I32EnumAttrCase<"gelu", 4>,
  I32EnumAttrCase<"rows", 5>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

def Modk_GemmPath : I32EnumAttr<"GemmPath", "a CUDA GEMM kernel family", [
  I32EnumAttrCase<"simt", 0>,
  I32EnumAttrCase<"mma", 1>,
  I32EnumAttrCase<"wgmma", 2>,
  I32EnumAttrCase<"stream", 3>,
  I32EnumAttrCase<"cutlass", 4>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

// How a CUTLASS kernel (`cutlass` in a #modk.gemm_config) runs its
// mainloop: sm_90a's TMA warp-specialised kernels, whose two consumer
// warpgroups share a tile (cooperative) or take turns on two (pingpong),
// and sm_80's multistage cp.async kernels.
def Modk_CutlassSchedule : I32EnumAttr<"CutlassSchedule", "how a CUTLASS GEMM kernel runs its mainloop", [
  I32EnumAttrCase<"cooperative", 0>,
  I32EnumAttrCase<"pingpong", 1>,
  I32EnumAttrCase<"multistage", 2>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

// The order in which a CUTLASS kernel's CTAs walk the output tiles: along
// M (consecutive CTAs share the weight's columns) or along N (they share
// the rows).
def Modk_RasterOrder : I32EnumAttr<"RasterOrder", "the order a CUTLASS GEMM walks its output tiles", [
  I32EnumAttrCase<"along_m", 0>,
  I32EnumAttrCase<"along_n", 1>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

def Modk_RoutingMode : I32EnumAttr<"RoutingMode", "how an entry's routed layers select their tokens", [
  I32EnumAttrCase<"topk", 0>,
  I32EnumAttrCase<"causal", 1>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

def Modk_ParamInit : I32EnumAttr<"ParamInit", "a parameter's initial values (docs/model-format.md, section 2)", [
  I32EnumAttrCase<"normal", 0>,
  I32EnumAttrCase<"ones", 1>,
  I32EnumAttrCase<"zeros", 2>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

def Modk_EntryKind : I32EnumAttr<"EntryKind", "what an entry computes: the package function it becomes", [
  // modc_forward: the forward pass (logits, routing masks; with a decode
  // entry, the causal prefill of the KV cache).
  I32EnumAttrCase<"forward", 0>,
  // modc_grad: losses and the gradient of every parameter.
  I32EnumAttrCase<"grad", 1>,
  // modc_decode: one token a sequence against the KV cache.
  I32EnumAttrCase<"decode", 2>,
  // modc_eval: the training losses in top-k mode, no gradient.
  I32EnumAttrCase<"eval", 3>,
  // modc_eval_causal: the losses with causal routing.
  I32EnumAttrCase<"eval_causal", 4>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

// How a modk.rows reads or writes one operand at row i of its row set,
// column c (docs/compiler.md, stage 5e, "Operand access"). Inputs take row, token,
// row_value, token_value, column, scalar, table and ids; outputs take row,
// token, row_value, token_value, column_sum, row_sum and scatter.
def Modk_Access : I32EnumAttr<"Access", "how a row kernel addresses an operand", [
  // Element (i, c) of a row buffer [B, rows, width].
  I32EnumAttrCase<"row", 0>,
  // Element c of the row's token in a token buffer [B, T, width].
  I32EnumAttrCase<"token", 1>,
  // One value a row, [B, rows] (an i32 input: a class, read as f32).
  I32EnumAttrCase<"row_value", 2>,
  // One value at the row's token, [B, T].
  I32EnumAttrCase<"token_value", 3>,
  // One value a column, [width] or [1, width] (a weight vector).
  I32EnumAttrCase<"column", 4>,
  // One value for the whole kernel, [1].
  I32EnumAttrCase<"scalar", 5>,
  // Row id(i) of a table [V, width]; id(i) is the `ids` input's value.
  I32EnumAttrCase<"table", 6>,
  // The row's id, i32 [B, rows]: addresses the tables; never read as a value.
  I32EnumAttrCase<"ids", 7>,
  // Adds over the rows into a [width] or [1, width] output (a weight's
  // gradient).
  I32EnumAttrCase<"column_sum", 8>,
  // Adds a value a row over the rows into a [1] output.
  I32EnumAttrCase<"row_sum", 9>,
  // Adds element (i, c) into row id(i) of a table [V, width].
  I32EnumAttrCase<"scatter", 10>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

#endif // MODC_DIALECT_MODK_ENUMS
