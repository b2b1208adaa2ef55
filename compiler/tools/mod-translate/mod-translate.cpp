//===- mod-translate.cpp - modk to C++ and other translations ----*- C++ -*-===//

#include "modc/Target/Package.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  modc::registerModkToCppTranslation();
  modc::registerModkToCudaTranslation();
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "modc translation driver"));
}
