//===- Files.h - Reading a user's whole file with clear errors --*- C++ -*-===//
//
// Small text inputs (a tokenizer.json, a prompt file) are read whole; every
// failure names the file and what it should have been (docs/errors.md).
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_FILES_H
#define MODRT_FILES_H

#include <string>

namespace modrt {

/// The bytes of the file at `path`, exactly as stored. Throws Error for a
/// directory ("PATH: is a directory, not a KIND"), a file that cannot be
/// opened (with the system's reason) or a failed read. `kind` names what
/// the file should be ("tokenizer.json", "prompt file").
std::string readWholeFile(const std::string &path, const std::string &kind);

} // namespace modrt

#endif // MODRT_FILES_H
