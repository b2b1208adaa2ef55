//===- ModelChoices.td - The model's enumerated choices ----*- tablegen -*-===//
//
// The choices of a model description (docs/model-format.md, section 1): the
// MLP's activation, the element type, the routed block's gate, its causal
// router and the routing schedule. Both dialects carry them as enum
// attributes of these one definitions (#mod.gate<sigmoid> in a mod.model,
// #modk.gate<sigmoid> on a kernel), so the IR, its parsers and verifiers
// and the lowering between them agree on one list of cases.
//
//===----------------------------------------------------------------------===//

#ifndef MODC_DIALECT_MODEL_CHOICES
#define MODC_DIALECT_MODEL_CHOICES

include "mlir/IR/EnumAttr.td"

class Modc_Choice<string name, string summary, list<I32EnumAttrCase> cases>
    : I32EnumAttr<name, summary, cases> {
  let cppNamespace = "::modc";
  let genSpecializedAttr = 0;
}

def Modc_Activation : Modc_Choice<"Activation", "the MLP's activation", [
  I32EnumAttrCase<"swiglu", 0>,
  I32EnumAttrCase<"gelu", 1>
]>;

def Modc_DType : Modc_Choice<"DType", "element type of the model's products", [
  I32EnumAttrCase<"f32", 0>,
  I32EnumAttrCase<"bf16", 1>
]>;

def Modc_Gate : Modc_Choice<"Gate", "g(r), the routed block's weight on its output", [
  I32EnumAttrCase<"linear", 0>,
  I32EnumAttrCase<"sigmoid", 1>,
  I32EnumAttrCase<"one", 2>
]>;

def Modc_CausalRouter : Modc_Choice<"CausalRouter", "how a routed layer decides causally", [
  I32EnumAttrCase<"none", 0>,
  I32EnumAttrCase<"aux_loss", 1>,
  I32EnumAttrCase<"predictor", 2>
]>;

def Modc_Schedule : Modc_Choice<"Schedule", "which layers of a model are routed", [
  I32EnumAttrCase<"every_other", 0>,
  I32EnumAttrCase<"all", 1>,
  I32EnumAttrCase<"none", 2>,
  I32EnumAttrCase<"layers", 3>
]>;

#endif // MODC_DIALECT_MODEL_CHOICES
