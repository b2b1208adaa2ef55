//===- ModkAttrs.td - Enumerated choices of modk ops --------*- tablegen -*-===//
//
// Every choice a modk op carries (a GEMM's epilogue, a gate, an activation,
// a causal router, an entry's dtype) is an enum attribute: the parser
// rejects an unknown case, the verifiers and emitters switch over the cases,
// and the IR prints them as #modk.epilogue<rope>. The model's own choices
// are defined once for both dialects (ModelChoices.td), modk's kernel
// choices in ModkEnums.td.
//
//===----------------------------------------------------------------------===//

#ifndef MODC_DIALECT_MODK_ATTRS
#define MODC_DIALECT_MODK_ATTRS

include "modc/Dialect/Modk/ModkDialect.td"
include "modc/Dialect/ModelChoices.td"
include "modc/Dialect/Modk/ModkEnums.td"

class Modk_EnumAttr<EnumAttrInfo info, string name>
    : EnumAttr<Modk_Dialect, info, name> {
  // The attribute class is modk's (modk::GateAttr); the enum may be modc's.
  let cppNamespace = "::modc::modk";
  let assemblyFormat = "`<` $value `>`";
}

def Modk_EpilogueAttr : Modk_EnumAttr<Modk_Epilogue, "epilogue">;
def Modk_GateAttr : Modk_EnumAttr<Modc_Gate, "gate">;
def Modk_ActivationAttr : Modk_EnumAttr<Modc_Activation, "activation">;
def Modk_CausalRouterAttr : Modk_EnumAttr<Modc_CausalRouter, "causal_router">;
def Modk_GemmPathAttr : Modk_EnumAttr<Modk_GemmPath, "gemm_path">;
def Modk_RoutingModeAttr : Modk_EnumAttr<Modk_RoutingMode, "mode">;
def Modk_DTypeAttr : Modk_EnumAttr<Modc_DType, "dtype">;
def Modk_AccessAttr : Modk_EnumAttr<Modk_Access, "access">;
def Modk_EntryKindAttr : Modk_EnumAttr<Modk_EntryKind, "entry_kind">;

def Modk_GemmConfigAttr : AttrDef<Modk_Dialect, "GemmConfig"> {
  let mnemonic = "gemm_config";
  let summary = "The CUDA kernels of one product, chosen by modk-configure-gemms";
  let description = [{
    A product's row count is known only at run time (the batch), so the
    configuration is a table by rows: each variant runs from its `from`
    row count up to the next variant's. A variant names the kernel family
    (`simt`, `mma` for mma.sync, `wgmma`, or `stream`: the few-row kernel
    that reads the weight once, forward products only), the output tile
    (rows x columns of a CTA; `stream` has one, 8x4), `tma N` where the
    wgmma kernel is fed by TMA on a persistent grid of N CTAs, and `separate_epilogue` where the
    epilogue (RoPE) does not fit the tile and runs as a kernel of its own.
    `split N` (weight gradients): the rows may be split into up to N
    chunks whose partial products are summed in chunk order; `chunk N`
    fixes the chunk's rows.

    `#modk.gemm_config<stream 8x4, from 65: wgmma 128x64 tma 264>`
  }];
  let parameters = (ins
    ArrayRefParameter<"::modc::modk::GemmVariant", "variants by rows">:$variants,
    DefaultValuedParameter<"int64_t", "1">:$maxSplits,
    DefaultValuedParameter<"int64_t", "0">:$chunkRows);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Whether a product so configured reads its weight through a bf16
    /// copy in global memory: a CUTLASS variant (but a tf32x3 one, which
    /// reads the f32 weight) or a TMA-fed wgmma one, and
    /// in a decode step the few-row kernel (`stream`), which streams the
    /// copy instead of the f32 weight.
    bool readsWeightCopy(bool decode) const;
  }];
}

// A list of integers printed and parsed in brackets, so that it can stand
// among other fields of a struct: `layers = [1, 3]`.
class Modk_IntList<string desc> : OptionalArrayRefParameter<"int64_t", desc> {
  let parser = [{ [&]() -> ::mlir::FailureOr<::llvm::SmallVector<int64_t>> {
    ::llvm::SmallVector<int64_t> values;
    if ($_parser.parseCommaSeparatedList(
            ::mlir::AsmParser::Delimiter::Square,
            [&] { return $_parser.parseInteger(values.emplace_back()); }))
      return ::mlir::failure();
    return values;
  }() }];
  let printer = [{
    $_printer << '[';
    ::llvm::interleaveComma($_self, $_printer);
    $_printer << ']';
  }];
}

def Modk_ParamAttr : AttrDef<Modk_Dialect, "Param"> {
  let mnemonic = "param";
  let summary = "One model parameter of an entry, in ABI order";
  let description = [{
    A parameter's name and shape (docs/model-format.md, section 2), its
    initial values (`normal` with standard deviation `std`, `ones` or
    `zeros`) and whether AdamW decays it (matrices do; norm weights and
    biases do not). The manifest's `params` list is printed from these.

    `#modk.param<name = "embed.weight", shape = [256, 64], init = normal,
    std = 2.000000e-02 : f64, decay = true>`
  }];
  let parameters = (ins
    StringRefParameter<"the parameter's name">:$name,
    Modk_IntList<"its shape">:$shape,
    EnumParameter<Modk_ParamInit>:$init,
    OptionalParameter<"::mlir::FloatAttr", "the normal init's std">:$std,
    DefaultValuedParameter<"bool", "false", "whether AdamW decays it">:$decay);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Modk_MoDConfigAttr : AttrDef<Modk_Dialect, "MoDConfig"> {
  let mnemonic = "mod_config";
  let summary = "The Mixture-of-Depths settings of a model";
  let description = [{
    The `mod` section of the model description (docs/model-format.md,
    section 1), normalised: one of `capacity` (a fraction of seq_len) and
    `capacity_tokens`; `schedule` is `every_other`, `all`, `none`, or
    `layers` with the routed layers listed in `layers`.

    `#modk.mod_config<capacity = 1.250000e-01, schedule = every_other,
    gate = linear, causal_router = predictor, aux_loss_weight = 1.000000e-02,
    predictor_hidden = 128>`
  }];
  let parameters = (ins
    OptionalParameter<"::mlir::FloatAttr", "fraction of seq_len">:$capacity,
    OptionalParameter<"std::optional<int64_t>", "tokens a sequence">:$capacity_tokens,
    EnumParameter<Modc_Schedule>:$schedule,
    Modk_IntList<"the routed layers">:$layers,
    EnumParameter<Modc_Gate>:$gate,
    EnumParameter<Modc_CausalRouter>:$causal_router,
    "::mlir::FloatAttr":$aux_loss_weight,
    "int64_t":$predictor_hidden);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Modk_MoEConfigAttr : AttrDef<Modk_Dialect, "MoEConfig"> {
  let mnemonic = "moe_config";
  let summary = "The Mixture-of-Experts settings of a model";
  let description = [{
    The `moe` object of the model description (docs/model-format.md,
    section 7), resolved: `layers` lists the MoE layers in ascending order
    and `capacities` each one's expert capacity C.

    `#modk.moe_config<n_experts = 4, noop_experts = 4, d_expert = 256,
    capacity_factor = 1.250000e+00, balance_loss_weight = 1.000000e-02,
    layers = [0, 1], capacities = [40, 40]>`
  }];
  let parameters = (ins
    "int64_t":$n_experts,
    "int64_t":$noop_experts,
    "int64_t":$d_expert,
    "::mlir::FloatAttr":$capacity_factor,
    "::mlir::FloatAttr":$balance_loss_weight,
    Modk_IntList<"the MoE layers">:$layers,
    Modk_IntList<"each MoE layer's expert capacity">:$capacities);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Modk_ModelAttr : AttrDef<Modk_Dialect, "Model"> {
  let mnemonic = "model";
  let summary = "The normalised model description an entry was made from";
  let description = [{
    Section 1 of docs/model-format.md, field by field: the package
    manifest's `model` object is printed from it, and the emitters read
    sizes from it. `mod` is absent for a dense model; `n_kv_heads` is
    absent where it equals n_heads.

    `#modk.model<name = "tiny", vocab_size = 256, d_model = 128,
    n_layers = 4, n_heads = 4, d_ff = 512, seq_len = 256, mlp = swiglu,
    norm_eps = 1.0000000000000001E-5, rope_theta = 1.000000e+04,
    tie_embeddings = true, dtype = f32, mod = <...>>`; `moe` is
    present for a model with Mixture-of-Experts MLPs.
  }];
  let parameters = (ins
    StringRefParameter<"the model's name">:$name,
    "int64_t":$vocab_size,
    "int64_t":$d_model,
    "int64_t":$n_layers,
    "int64_t":$n_heads,
    OptionalParameter<"std::optional<int64_t>",
                      "key/value heads where fewer than n_heads">:$n_kv_heads,
    "int64_t":$d_ff,
    "int64_t":$seq_len,
    EnumParameter<Modc_Activation>:$mlp,
    "::mlir::FloatAttr":$norm_eps,
    "::mlir::FloatAttr":$rope_theta,
    "::mlir::BoolAttr":$tie_embeddings,
    EnumParameter<Modc_DType>:$dtype,
    OptionalParameter<"::modc::modk::MoDConfigAttr", "MoD settings">:$mod,
    OptionalParameter<"::modc::modk::MoEConfigAttr", "MoE settings">:$moe);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    int64_t getHeadDim() const { return getDModel() / getNHeads(); }
    /// The key/value heads (docs/model-format.md section 3): n_kv_heads, or
    /// n_heads where it is absent.
    int64_t getKvHeads() const { return getNKvHeads().value_or(getNHeads()); }
  }];
}

#endif // MODC_DIALECT_MODK_ATTRS
