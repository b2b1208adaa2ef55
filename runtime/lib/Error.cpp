//===- Error.cpp - The one exception type of the runtime -----------------===//
//
// Out of line so that the vtable and type info live in one object file.
//
//===----------------------------------------------------------------------===//
#include "modrt/Error.h"

using namespace modrt;

Error::Error(const std::string &message) : std::runtime_error(message) {}
