//===- fuzz_package.cpp - Fuzz target: the package loader's checks -------===//
//
// Input: a mode byte, then the bytes of one file of a package directory.
//  - even: manifest.json, beside a real libmodel.so (the fake package of
//    test/runtime). Package::open must refuse every manifest but the one
//    the library embeds with modrt::Error (docs/errors.md, "packages").
//  - odd: libmodel.so itself, given to the truncation check that runs before
//    dlopen (Package.cpp: truncatedElfReason). A file that the check passes
//    is not loaded: dlopen of arbitrary ELF bytes is the dynamic loader's
//    business and could run code.
// Package.cpp is compiled into this file to reach that check, which is
// internal to it; the target links the other runtime sources.
//
//===----------------------------------------------------------------------===//
#include "../../runtime/lib/Package.cpp"

#include "FuzzUtil.h"

namespace {
std::string packageDir() {
  static const std::string dir = [] {
    std::string d = fuzz::scratchDir() + "/pkg";
    std::filesystem::create_directories(d);
    std::filesystem::copy_file(FAKE_MODEL_V0, d + "/libmodel.so",
                               std::filesystem::copy_options::overwrite_existing);
    return d;
  }();
  return dir;
}
} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  packageDir();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  const bool elf = data[0] & 1;
  ++data;
  --size;
  if (elf) {
    const std::string path = fuzz::scratchDir() + "/libmodel.so";
    fuzz::writeFile(path, data, size);
    std::string why = truncatedElfReason(path);
    // A file shorter than an ELF header with the ELF magic is always
    // truncated; a file without the magic is always left to dlopen.
    if (size >= SELFMAG && size < sizeof(Elf64_Ehdr) &&
        std::memcmp(data, ELFMAG, SELFMAG) == 0)
      fuzz::require(!why.empty(), "a cut ELF header is reported");
    if (size < SELFMAG || std::memcmp(data, ELFMAG, SELFMAG) != 0)
      fuzz::require(why.empty(), "non-ELF files are left to dlopen");
    return 0;
  }
  fuzz::writeFile(packageDir() + "/manifest.json", data, size);
  try {
    Package pkg = Package::open(packageDir());
    fuzz::require(pkg.manifest().target == "cpu",
                  "only the embedded manifest (a cpu package) opens");
  } catch (const Error &) {
  }
  return 0;
}
