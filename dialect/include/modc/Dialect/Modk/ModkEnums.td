//===- ModkEnums.td - Kernel choices of modk ops ------------*- tablegen -*-===//
//
// The choices that only the kernel level makes: a GEMM's epilogue, a CUDA
// GEMM's kernel family, the routing modes an entry serves and how a parameter
// starts. Their C++ enums are generated from this file alone
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
  I32EnumAttrCase<"gate_scale_scatter", 5>,
  I32EnumAttrCase<"rows", 6>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

def Modk_GemmPath : I32EnumAttr<"GemmPath", "a CUDA GEMM kernel family", [
  I32EnumAttrCase<"simt", 0>,
  I32EnumAttrCase<"mma", 1>,
  I32EnumAttrCase<"wgmma", 2>,
  I32EnumAttrCase<"stream", 3>
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

#endif // MODC_DIALECT_MODK_ENUMS
