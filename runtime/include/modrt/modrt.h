//===- modrt.h - The whole public API of the modc runtime -------*- C++ -*-===//
//
// One include for applications: packages and the forward pass, training,
// data-parallel communicators, token-by-token decoding, sampling and
// generation, tensors and errors.
// The C ABI between packages and the runtime is modrt/abi.h (included by the
// runtime's sources, not needed by applications).
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_MODRT_H
#define MODRT_MODRT_H

#include "modrt/Comm.h"
#include "modrt/Error.h"
#include "modrt/Generate.h"
#include "modrt/Package.h"
#include "modrt/Tensor.h"
#include "modrt/Tokenizer.h"
#include "modrt/Training.h"

#endif // MODRT_MODRT_H
