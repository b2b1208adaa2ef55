//===- ModAttrs.td - Enumerated choices of mod ops ----------*- tablegen -*-===//
//
// A mod.model and its blocks carry the model description's choices
// (ModelChoices.td) as enum attributes: the parser rejects an unknown case
// and the IR prints them as #mod.gate<sigmoid>.
//
//===----------------------------------------------------------------------===//

#ifndef MODC_DIALECT_MOD_ATTRS
#define MODC_DIALECT_MOD_ATTRS

include "modc/Dialect/Mod/ModDialect.td"
include "modc/Dialect/ModelChoices.td"

class Mod_EnumAttr<EnumAttrInfo info, string name>
    : EnumAttr<Mod_Dialect, info, name> {
  // The attribute class is mod's (mod::GateAttr); the enum is modc's.
  let cppNamespace = "::modc::mod";
  let assemblyFormat = "`<` $value `>`";
}

def Mod_ActivationAttr : Mod_EnumAttr<Modc_Activation, "activation">;
def Mod_DTypeAttr : Mod_EnumAttr<Modc_DType, "dtype">;
def Mod_GateAttr : Mod_EnumAttr<Modc_Gate, "gate">;
def Mod_CausalRouterAttr : Mod_EnumAttr<Modc_CausalRouter, "causal_router">;
def Mod_ScheduleAttr : Mod_EnumAttr<Modc_Schedule, "schedule">;

#endif // MODC_DIALECT_MOD_ATTRS
