//===- Files.cpp - Reading a user's whole file with clear errors ---------===//

#include "modrt/Files.h"
#include "modrt/Error.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

std::string modrt::readWholeFile(const std::string &path,
                                 const std::string &kind) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(fmt::format("{}: is a directory, not a {}", path, kind));
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(fmt::format("{}: cannot open: {}", path,
                            errno ? std::strerror(errno) : "unknown error"));
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (in.bad())
    throw Error(fmt::format("{}: read failed", path));
  return text;
}
