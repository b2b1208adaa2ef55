//===- ModkAttrs.td - Enumerated choices of modk ops --------*- tablegen -*-===//
//
// Every choice a modk op carries (a GEMM's epilogue, a gate, an activation,
// a causal router, an entry's dtype) is an enum attribute: the parser
// rejects an unknown case, the verifiers and emitters switch over the cases,
// and the IR prints them as #modk.epilogue<rope>.
//
//===----------------------------------------------------------------------===//

#ifndef MODC_DIALECT_MODK_ATTRS
#define MODC_DIALECT_MODK_ATTRS

include "modc/Dialect/Modk/ModkDialect.td"
include "mlir/IR/EnumAttr.td"

def Modk_Epilogue : I32EnumAttr<"Epilogue", "what a GEMM does to its rows before storing them", [
  I32EnumAttrCase<"none", 0>,
  I32EnumAttrCase<"rope", 1>,
  I32EnumAttrCase<"residual_add", 2>,
  I32EnumAttrCase<"swiglu", 3>,
  I32EnumAttrCase<"gelu", 4>,
  I32EnumAttrCase<"gate_scale_scatter", 5>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

def Modk_Gate : I32EnumAttr<"Gate", "g(r), the routed block's weight on its output", [
  I32EnumAttrCase<"linear", 0>,
  I32EnumAttrCase<"sigmoid", 1>,
  I32EnumAttrCase<"one", 2>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

def Modk_Activation : I32EnumAttr<"Activation", "the MLP's activation", [
  I32EnumAttrCase<"swiglu", 0>,
  I32EnumAttrCase<"gelu", 1>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

def Modk_CausalRouter : I32EnumAttr<"CausalRouter", "how a routed layer decides causally", [
  I32EnumAttrCase<"none", 0>,
  I32EnumAttrCase<"aux_loss", 1>,
  I32EnumAttrCase<"predictor", 2>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

def Modk_DType : I32EnumAttr<"DType", "element type of an entry's products", [
  I32EnumAttrCase<"f32", 0>,
  I32EnumAttrCase<"bf16", 1>
]> {
  let cppNamespace = "::modc::modk";
  let genSpecializedAttr = 0;
}

class Modk_EnumAttr<EnumAttrInfo info, string name>
    : EnumAttr<Modk_Dialect, info, name> {
  let assemblyFormat = "`<` $value `>`";
}

def Modk_EpilogueAttr : Modk_EnumAttr<Modk_Epilogue, "epilogue">;
def Modk_GateAttr : Modk_EnumAttr<Modk_Gate, "gate">;
def Modk_ActivationAttr : Modk_EnumAttr<Modk_Activation, "activation">;
def Modk_CausalRouterAttr : Modk_EnumAttr<Modk_CausalRouter, "causal_router">;
def Modk_DTypeAttr : Modk_EnumAttr<Modk_DType, "dtype">;

#endif // MODC_DIALECT_MODK_ATTRS
