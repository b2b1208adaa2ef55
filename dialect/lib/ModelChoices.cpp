//===- ModelChoices.cpp - The model's enumerated choices --------*- C++ -*-===//

#include "modc/Dialect/ModelChoices.h"

#include "modc/Dialect/ModelChoices.cpp.inc"
