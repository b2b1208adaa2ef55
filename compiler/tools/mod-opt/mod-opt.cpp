//===- mod-opt.cpp - The modc optimizer driver -------------------*- C++ -*-===//

#include "modc/InitAll.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  modc::registerAllDialects(registry);
  modc::registerModcPassesAndPipelines();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "modc optimizer driver\n", registry));
}
