//===- PackageWriter.cpp - Build a package directory ------------*- C++ -*-===//
//
// Everything is written into a temporary sibling directory first and renamed
// into place only when the shared library has been built: a failed compile
// never leaves a partial package behind.
//
//===----------------------------------------------------------------------===//

#include "Cuda/CutlassGemms.h"
#include "modc/Target/Package.h"
#include "modrt/CpuFeatures.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/ToolOutputFile.h"

#include <chrono>
#include <fmt/format.h>

using namespace mlir;
using namespace modc;
namespace fs = llvm::sys::fs;

static llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

static llvm::Error writeFile(llvm::StringRef path,
                             llvm::function_ref<void(llvm::raw_ostream &)> fn) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, fs::OF_Text);
  if (ec)
    return makeError("cannot write " + path + ": " + ec.message());
  fn(os);
  os.close();
  if (os.has_error())
    return makeError("cannot write " + path + ": " + os.error().message());
  return llvm::Error::success();
}

/// Removes a directory tree when it goes out of scope unless released.
struct TempDir {
  std::string path;
  bool keep = false;
  ~TempDir() {
    if (!keep && !path.empty())
      fs::remove_directories(path, /*IgnoreErrors=*/true);
  }
};

/// True when `path` is the manifest of a package this compiler wrote: only
/// such a directory may be replaced wholesale.
static bool isPackageManifest(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return false;
  llvm::Expected<llvm::json::Value> manifest =
      llvm::json::parse((*buffer)->getBuffer());
  if (!manifest) {
    llvm::consumeError(manifest.takeError());
    return false;
  }
  const llvm::json::Object *object = manifest->getAsObject();
  return object && object->getString("format") == "modc-package";
}

/// Runs `args` with its output in `log`; on failure the error quotes the end
/// of the log.
static llvm::Error runLogged(llvm::ArrayRef<std::string> args,
                             llvm::StringRef log, bool verbose,
                             llvm::StringRef what) {
  llvm::SmallVector<llvm::StringRef> argRefs(args.begin(), args.end());
  if (verbose) {
    llvm::errs() << "modc: running";
    for (llvm::StringRef a : argRefs)
      llvm::errs() << " " << a;
    llvm::errs() << "\n";
  }
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, log, log};
  std::string message;
  int rc = llvm::sys::ExecuteAndWait(args.front(), argRefs, std::nullopt,
                                     redirects, 0, 0, &message);
  if (rc != 0) {
    std::string output;
    if (auto buffer = llvm::MemoryBuffer::getFile(log))
      output = (*buffer)->getBuffer().take_back(4000).str();
    return makeError("compiling the generated " + what + " failed (" +
                     (message.empty() ? "exit " + std::to_string(rc) : message) +
                     "):\n" + output);
  }
  return llvm::Error::success();
}

llvm::Expected<CpuIsa> modc::queryCpuIsa(llvm::StringRef cxx,
                                         llvm::StringRef march) {
  llvm::ErrorOr<std::string> program = llvm::sys::findProgramByName(cxx);
  if (!program || !fs::can_execute(*program))
    return makeError("C++ compiler '" + cxx +
                     "' not found (set --cxx or the CXX environment variable)");
  llvm::SmallString<128> macros;
  if (std::error_code ec =
          fs::createTemporaryFile("modc-march", "txt", macros))
    return makeError("cannot create a temporary file: " + ec.message());
  llvm::FileRemover removeMacros(macros);
  std::string marchFlag = ("-march=" + march).str();
  llvm::StringRef args[] = {*program, "-x",  "c++", marchFlag,
                            "-dM",    "-E", "/dev/null"};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, macros.str(),
                                                macros.str()};
  int rc = llvm::sys::ExecuteAndWait(*program, args, std::nullopt,
                                     redirects);
  auto buffer = llvm::MemoryBuffer::getFile(macros);
  if (rc != 0 || !buffer)
    return makeError(
        "the C++ compiler '" + cxx + "' rejects --march=" + march + " (" +
        (rc < 0 ? "could not run it" : "exit " + std::to_string(rc)) +
        "; modc asks it which CPU features that enables)" +
        (buffer ? ":\n" + (*buffer)->getBuffer().take_back(2000).str()
                : std::string()));
  // "#define __AVX2__ 1" for each enabled feature.
  llvm::StringSet<> defined;
  llvm::SmallVector<llvm::StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n');
  for (llvm::StringRef line : lines) {
    llvm::SmallVector<llvm::StringRef, 3> words;
    line.split(words, ' ', 2, /*KeepEmpty=*/false);
    if (words.size() >= 2 && words[0] == "#define")
      defined.insert(words[1]);
  }
  CpuIsa isa{march.str(), {}};
  for (const modrt::CpuFeature &f : modrt::knownCpuFeatures())
    if (defined.contains(f.macro))
      isa.features.push_back(f.name);
  return isa;
}

/// A modc built with MODC_SANITIZE compiles its packages with the same
/// sanitizers: its tests load them into sanitized processes.
static void appendSanitizeFlags(llvm::SmallVectorImpl<std::string> &args) {
  llvm::SmallVector<llvm::StringRef> flags;
  llvm::StringRef(MODC_PACKAGE_SANITIZE_FLAGS)
      .split(flags, ' ', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef flag : flags)
    args.push_back(flag.str());
}

static llvm::Error compileCpuSource(const PackageOptions &opts,
                                    llvm::StringRef dir) {
  llvm::ErrorOr<std::string> cxx = llvm::sys::findProgramByName(opts.cxx);
  if (!cxx || !fs::can_execute(*cxx))
    return makeError("C++ compiler '" + opts.cxx +
                     "' not found (set --cxx or the CXX environment variable)");
  llvm::SmallString<256> source(dir), library(dir), log(dir);
  llvm::sys::path::append(source, "model.cpp");
  llvm::sys::path::append(library, "libmodel.so");
  llvm::sys::path::append(log, "build.log");
  std::string march = "-march=" + opts.cpuArch;
  llvm::SmallVector<std::string> args = {*cxx,      "-std=c++17", "-O3",
                                         march,     "-fopenmp",   "-fPIC",
                                         "-shared", "-fvisibility=hidden"};
  // The OpenMP build of OpenBLAS shares the kernels' OpenMP threads; with the
  // pthreads build, idle OpenMP threads spin against BLAS threads and both
  // slow down. The run path makes dlopen pick that build.
  if (!llvm::StringRef(MODC_OPENMP_BLAS_DIR).empty()) {
    args.push_back("-I" MODC_OPENMP_BLAS_INCLUDE_DIR);
    args.push_back("-L" MODC_OPENMP_BLAS_DIR);
    args.push_back("-Wl,-rpath," MODC_OPENMP_BLAS_DIR);
  }
  appendSanitizeFlags(args);
  args.append({"-o", std::string(library), std::string(source), "-lopenblas"});
  if (llvm::Error e = runLogged(args, log, opts.verbose, "C++"))
    return e;
  fs::remove(log);
  return llvm::Error::success();
}

/// nvcc builds the device code for one architecture into libmodel.so, with
/// the CUDA runtime linked statically (the package needs only the driver).
/// ptxas's resource report (registers, spills per kernel) is kept in the
/// package as ptxas-report.txt.
/// Tests only: the CUDA source built as C++ against the CPU emulation.
static llvm::Error compileEmulatedCudaSource(const PackageOptions &opts,
                                             llvm::StringRef dir) {
  llvm::ErrorOr<std::string> cxx = llvm::sys::findProgramByName(opts.cxx);
  if (!cxx || !fs::can_execute(*cxx))
    return makeError("C++ compiler '" + opts.cxx + "' not found");
  llvm::SmallString<256> source(dir), library(dir), log(dir);
  llvm::sys::path::append(source, "model.cu");
  llvm::sys::path::append(library, "libmodel.so");
  llvm::sys::path::append(log, "build.log");
  // Symbols stay visible: the emulation's launch log names kernels by them.
  // -O1: two thirds of -O2's compile time, and the tests' small models run
  // as fast (an hd128 bf16 package: 25 s against 37 s to build, gradients
  // in 8 s either way).
  llvm::SmallVector<std::string> args = {
      *cxx, "-std=c++20", "-O1", "-x", "c++", "-fPIC", "-shared", "-pthread",
      "-I" + opts.cudaEmulationDir, "-o", std::string(library),
      std::string(source)};
  appendSanitizeFlags(args);
  if (llvm::Error e = runLogged(args, log, opts.verbose, "CUDA (emulated)"))
    return e;
  fs::remove(log);
  return llvm::Error::success();
}

static llvm::Error compileCudaSource(const PackageOptions &opts,
                                     llvm::StringRef dir,
                                     llvm::ArrayRef<std::string> extraFlags) {
  if (!opts.cudaEmulationDir.empty())
    return compileEmulatedCudaSource(opts, dir);
  llvm::ErrorOr<std::string> nvcc = llvm::sys::findProgramByName(opts.nvcc);
  if (!nvcc)
    nvcc = llvm::sys::findProgramByName(opts.nvcc, {"/usr/local/cuda/bin"});
  if (!nvcc || !fs::can_execute(*nvcc))
    return makeError("CUDA compiler '" + opts.nvcc +
                     "' not found (install the CUDA Toolkit, or set --nvcc or "
                     "the NVCC environment variable)");
  llvm::SmallString<256> source(dir), library(dir), log(dir);
  llvm::sys::path::append(source, "model.cu");
  llvm::sys::path::append(library, "libmodel.so");
  llvm::sys::path::append(log, "ptxas-report.txt");
  llvm::StringRef arch(opts.cudaArch);
  std::string compute = ("compute_" + arch.drop_front(3)).str();
  // sm_90a features run on 9.0 only; sm_80 also carries PTX for newer GPUs.
  std::string gencode =
      arch.ends_with("a")
          ? fmt::format("-gencode=arch={},code={}", compute, arch.str())
          : fmt::format("-gencode=arch={0},code=[{1},{0}]", compute, arch.str());
  // --split-compile: cicc and ptxas optimise the kernels on several
  // threads; the same registers and code (docs/cuda.md, "Compile time").
  llvm::SmallVector<std::string> args = {
      *nvcc,     "-std=c++17",  "-O3", gencode, "-shared",
      "-Xcompiler", "-fPIC,-fvisibility=hidden", "-cudart", "static",
      "--split-compile=" + std::to_string(opts.cudaJobs),
      "-Xptxas", "-v", "-o", std::string(library), std::string(source)};
  // An empty range would move the arguments onto themselves.
  if (!extraFlags.empty())
    args.insert(args.begin() + 1, extraFlags.begin(), extraFlags.end());
  return runLogged(args, log, opts.verbose, "CUDA");
}

llvm::Error modc::writePackage(ModuleOp module, const PackageOptions &opts) {
  bool cuda = opts.target == "cuda";
  auto entries = llvm::to_vector(module.getOps<modk::EntryOp>());
  if (entries.empty())
    return makeError("expected a modk.entry to package");

  llvm::SmallString<256> out(opts.outputDir);
  fs::make_absolute(out);
  llvm::sys::path::remove_dots(out, /*remove_dot_dot=*/true);
  if (fs::exists(out)) {
    if (!fs::is_directory(out))
      return makeError(out + " exists and is not a directory");
    llvm::SmallString<256> manifest(out);
    llvm::sys::path::append(manifest, "manifest.json");
    std::error_code ec;
    bool empty = fs::directory_iterator(out, ec) == fs::directory_iterator();
    if (!empty && !isPackageManifest(manifest))
      return makeError(out + " exists and is not a modc package; refusing to "
                             "replace it");
  }
  llvm::StringRef parent = llvm::sys::path::parent_path(out);
  if (!parent.empty() && !fs::is_directory(parent))
    return makeError("output directory's parent " + parent + " does not exist");

  TempDir temp;
  temp.path = fmt::format("{}.tmp-{}", out.str().str(),
                          (int)llvm::sys::Process::getProcessId());
  fs::remove_directories(temp.path, true);
  if (std::error_code ec = fs::create_directory(temp.path))
    return makeError("cannot create " + temp.path + ": " + ec.message());
  temp.keep = opts.keepTemp;

  auto inTemp = [&](llvm::StringRef file) {
    llvm::SmallString<256> p(temp.path);
    llvm::sys::path::append(p, file);
    return std::string(p);
  };
  if (llvm::Error e = writeFile(inTemp("model.modk.mlir"),
                                [&](llvm::raw_ostream &os) { module.print(os); }))
    return e;
  // Products on CUTLASS: nvcc reads its headers (docs/cuda.md, "CUTLASS").
  std::vector<std::string> cutlassFlags;
  if (cuda && opts.cudaEmulationDir.empty() && usesCutlass(entries)) {
    if (cutlassIncludeDirs().empty())
      return makeError(
          "--cuda-gemms=cutlass needs CUTLASS's headers, and this modc was "
          "configured without them: run scripts/install-deps.sh, or set "
          "MODC_CUTLASS_INCLUDE_DIR to a CUTLASS include/ directory, and "
          "configure modc again (docs/cuda.md, \"CUTLASS\")");
    for (const std::string &dir : cutlassIncludeDirs())
      cutlassFlags.push_back("-I" + dir);
    cutlassFlags.push_back("--expt-relaxed-constexpr");
    cutlassFlags.push_back("-DNDEBUG");
  }
  std::optional<CpuIsa> cpuIsa;
  if (!cuda) {
    llvm::Expected<CpuIsa> isa = queryCpuIsa(opts.cxx, opts.cpuArch);
    if (!isa)
      return isa.takeError();
    cpuIsa = std::move(*isa);
  }
  bool emitted = true;
  std::string source = inTemp(cuda ? "model.cu" : "model.cpp");
  if (llvm::Error e = writeFile(source, [&](llvm::raw_ostream &os) {
        emitted = succeeded(cuda ? emitCuda(module, os, opts.cudaArch)
                                 : emitCpp(module, os, &*cpuIsa));
      }))
    return e;
  if (!emitted)
    return makeError(cuda ? "CUDA emission failed" : "C++ emission failed");
  if (llvm::Error e =
          writeFile(inTemp("manifest.json"), [&](llvm::raw_ostream &os) {
            std::string manifest =
                buildManifest(entries, opts.target, cuda ? opts.cudaArch : "",
                              cpuIsa ? &*cpuIsa : nullptr);
            // The package's tokenizer: a key of manifest.json only, which the
            // runtime leaves out when it compares it with the library's.
            if (!opts.tokenizerFile.empty() &&
                llvm::StringRef(manifest).starts_with("{"))
              manifest.insert(1, "\n  \"tokenizer\": \"tokenizer.json\",");
            os << manifest;
          }))
    return e;
  if (!opts.tokenizerFile.empty())
    if (std::error_code ec =
            fs::copy_file(opts.tokenizerFile, inTemp("tokenizer.json")))
      return makeError("cannot copy the tokenizer " + opts.tokenizerFile +
                       " into the package: " + ec.message());
  llvm::errs() << "modc: compiling the generated kernels (" << source
               << (cuda ? ", nvcc " + opts.cudaArch : std::string()) << ")...\n";
  auto started = std::chrono::steady_clock::now();
  if (llvm::Error e = cuda ? compileCudaSource(opts, temp.path, cutlassFlags)
                           : compileCpuSource(opts, temp.path))
    return e;
  // The longest step by far (a minute or more for CUDA): say what it took.
  llvm::errs() << fmt::format(
      "modc: compiled the kernels in {:.1f} s\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
          .count());

  // Swap the finished package into place.
  std::string old = fmt::format("{}.old-{}", out.str().str(),
                                (int)llvm::sys::Process::getProcessId());
  bool hadOld = fs::exists(out);
  if (hadOld)
    if (std::error_code ec = fs::rename(out, old))
      return makeError("cannot move the old package aside: " + ec.message());
  if (std::error_code ec = fs::rename(temp.path, out)) {
    if (hadOld)
      fs::rename(old, out);
    return makeError("cannot move the package into place: " + ec.message());
  }
  temp.path.clear();
  if (hadOld)
    fs::remove_directories(old, true);
  return llvm::Error::success();
}
