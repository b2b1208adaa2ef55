//===- Error.h - The one exception type of the runtime ----------*- C++ -*-===//
//
// Every failure a user can cause (a bad file, a wrong package, a wrong
// argument) is reported by throwing modrt::Error with a message that names
// what is wrong: the file, the tensor or key, what was expected and what was
// found. The runtime never asserts on user input.
//
//===----------------------------------------------------------------------===//
#ifndef MODRT_ERROR_H
#define MODRT_ERROR_H

#include <stdexcept>
#include <string>

namespace modrt {

/// A user-facing failure; what() is a complete, self-contained message.
class Error : public std::runtime_error {
public:
  /// Creates an error carrying `message` verbatim.
  explicit Error(const std::string &message);
};

} // namespace modrt

#endif // MODRT_ERROR_H
