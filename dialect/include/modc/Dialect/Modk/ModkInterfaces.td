//===- ModkInterfaces.td - Interfaces of the modk dialect --*- tablegen -*-===//

#ifndef MODC_DIALECT_MODK_INTERFACES
#define MODC_DIALECT_MODK_INTERFACES

include "mlir/IR/OpBase.td"

def Modk_ColumnWindowReader : OpInterface<"ColumnWindowReader"> {
  let cppNamespace = "::modc::modk";
  let description = [{
    A kernel that may read some of its buffer operands as a
    modk.column_window: the columns of a stacked product, indexed by the
    source's row stride (docs/compiler.md, stage 5f'). modk-fuse-horizontal
    hands a member's window to its readers in place of a buffer of its own
    only where each says it can; the modk.column_window verifier refuses a
    window anywhere else. Only the CPU kernels read windows: the CUDA
    emitter refuses them.
  }];
  let methods = [
    InterfaceMethod<
      "Whether operand `operandNumber` may be a column window.",
      "bool", "readsWindowOperand", (ins "unsigned":$operandNumber)>,
  ];
}

#endif // MODC_DIALECT_MODK_INTERFACES
