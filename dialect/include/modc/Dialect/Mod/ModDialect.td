//===- ModDialect.td - The model-level MoD dialect ---------*- tablegen -*-===//
//
// `mod` describes a Mixture-of-Depths model as its user thinks of it: blocks,
// routers, top-k selections with a static capacity, gathers and gated
// residuals. Activations are tensors whose leading (batch) dimension is
// dynamic; every other dimension is static.
//
//===----------------------------------------------------------------------===//

#ifndef MODC_DIALECT_MOD_DIALECT
#define MODC_DIALECT_MOD_DIALECT

include "mlir/IR/OpBase.td"

def Mod_Dialect : Dialect {
  let name = "mod";
  let summary = "Model-level Mixture-of-Depths dialect";
  let description = [{
    The `mod` dialect holds a Mixture-of-Depths transformer with static
    capacity. A `mod.model` op carries the model configuration; its body is the
    forward pass over a batch of token sequences of length `seq_len`.
  }];
  let cppNamespace = "::modc::mod";
  let useDefaultAttributePrinterParser = 1;
}

class Mod_Op<string mnemonic, list<Trait> traits = []>
    : Op<Mod_Dialect, mnemonic, traits>;

#endif // MODC_DIALECT_MOD_DIALECT
