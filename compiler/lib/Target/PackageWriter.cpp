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
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/Threading.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

#include <chrono>
#include <fmt/format.h>
#include <mutex>
#include <optional>

using namespace mlir;
using namespace modc;
namespace fs = llvm::sys::fs;

static llvm::Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

static llvm::Error writeFile(llvm::StringRef path,
                             llvm::function_ref<void(llvm::raw_ostream &)> fn,
                             fs::OpenFlags flags = fs::OF_Text) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, flags);
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
  if (verbose) // one write: nvcc's processes may run side by side
    llvm::errs() << "modc: running " + llvm::join(argRefs, " ") + "\n";
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
  // -Og by default: most tests build such a package and run it briefly on
  // a small model, where the build's time is what counts; tests that train
  // for many steps ask for more (--cuda-emulation-opt; docs/testing.md,
  // "Time").
  llvm::SmallVector<std::string> args = {
      *cxx, "-std=c++20", "-O" + opts.cudaEmulationOpt, "-x", "c++", "-fPIC",
      "-shared", "-pthread",
      "-I" + opts.cudaEmulationDir, "-o", std::string(library),
      std::string(source)};
  appendSanitizeFlags(args);
  if (llvm::Error e = runLogged(args, log, opts.verbose, "CUDA (emulated)"))
    return e;
  fs::remove(log);
  return llvm::Error::success();
}

namespace {
/// The kernel cache (docs/cuda.md, "Compile time"): the object and ptxas
/// report of each CUTLASS kernel file nvcc compiled, keyed by the file's
/// text and everything else that makes the object. An entry is one file,
/// KEY.kernel: a line `modc-kernel-cache 1 OBJECT_BYTES REPORT_BYTES
/// SHA256`, then the object and the report. It is written to a unique
/// temporary file and renamed into place, so that no reader sees it half
/// written, and a reader checks the sizes and the checksum: an entry cut
/// short or damaged is compiled again, and replaced.
class KernelCache {
public:
  /// The directory: --kernel-cache, else $MODC_CACHE_DIR, else
  /// $XDG_CACHE_HOME/modc/kernels, else ~/.cache/modc/kernels; empty where
  /// there is none (no home directory).
  static std::string directory(llvm::StringRef option) {
    if (!option.empty())
      return option.str();
    if (std::optional<std::string> dir =
            llvm::sys::Process::GetEnv("MODC_CACHE_DIR");
        dir && !dir->empty())
      return *dir;
    llvm::SmallString<256> path;
    if (std::optional<std::string> xdg =
            llvm::sys::Process::GetEnv("XDG_CACHE_HOME");
        xdg && llvm::sys::path::is_absolute(*xdg)) {
      path = *xdg;
    } else {
      if (!llvm::sys::path::home_directory(path))
        return "";
      llvm::sys::path::append(path, ".cache");
    }
    llvm::sys::path::append(path, "modc", "kernels");
    return std::string(path);
  }

  /// Opens the cache at `dir`, creating it; where it cannot be written,
  /// says so and keeps the cache off (the compile goes on without it).
  void open(llvm::StringRef dir) {
    auto unusable = [&](const llvm::Twine &why) {
      llvm::WithColor::warning(llvm::errs(), "modc")
          << "cannot use the kernel cache " << dir << " (" << why
          << "); compiling the CUTLASS kernels without it\n";
    };
    if (dir.empty())
      return unusable("no home directory; set MODC_CACHE_DIR or "
                      "--kernel-cache");
    if (std::error_code ec = fs::create_directories(dir))
      return unusable(ec.message());
    // Whether entries can be written: a probe, removed at once.
    llvm::SmallString<256> probe(dir), probePath;
    llvm::sys::path::append(probe, "probe-%%%%%%%%.tmp");
    int fd = -1;
    if (std::error_code ec = fs::createUniqueFile(probe, fd, probePath))
      return unusable(ec.message());
    llvm::sys::Process::SafelyCloseFileDescriptor(fd);
    fs::remove(probePath);
    root = dir.str();
  }
  bool enabled() const { return !root.empty(); }
  llvm::StringRef dir() const { return root; }

  /// The entry's path.
  std::string pathOf(llvm::StringRef key) const {
    llvm::SmallString<256> path(root);
    llvm::sys::path::append(path, key + ".kernel");
    return std::string(path);
  }

  /// The object and report stored under `key`; nothing where there is no
  /// entry or it is damaged (`damaged` then says so).
  std::optional<std::pair<std::string, std::string>> load(llvm::StringRef key,
                                                          bool &damaged) const {
    damaged = false;
    auto buffer = llvm::MemoryBuffer::getFile(pathOf(key), /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer)
      return std::nullopt;
    damaged = true;
    auto [header, rest] = (*buffer)->getBuffer().split('\n');
    llvm::SmallVector<llvm::StringRef, 5> words;
    header.split(words, ' ');
    uint64_t objectBytes = 0, reportBytes = 0;
    if (words.size() != 5 || words[0] != "modc-kernel-cache" ||
        words[1] != "1" || words[2].getAsInteger(10, objectBytes) ||
        words[3].getAsInteger(10, reportBytes) || objectBytes == 0 ||
        rest.size() != objectBytes + reportBytes || words[4] != checksum(rest))
      return std::nullopt;
    damaged = false;
    return std::make_pair(rest.take_front(objectBytes).str(),
                          rest.drop_front(objectBytes).str());
  }

  /// Stores an entry, atomically; a failure is said once and costs only
  /// the entry.
  void store(llvm::StringRef key, llvm::StringRef object,
             llvm::StringRef report) {
    llvm::SmallString<256> pattern(root), temp;
    llvm::sys::path::append(pattern, key + "-%%%%%%%%.tmp");
    int fd = -1;
    std::error_code ec = fs::createUniqueFile(pattern, fd, temp);
    if (!ec) {
      llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
      std::string contents = (object + report).str();
      os << fmt::format("modc-kernel-cache 1 {} {} {}\n", object.size(),
                        report.size(), checksum(contents))
         << contents;
      os.close();
      if (os.has_error()) {
        ec = os.error();
        os.clear_error();
      }
      if (!ec)
        ec = fs::rename(temp, pathOf(key));
      if (ec)
        fs::remove(temp);
    }
    if (ec && !storeFailed) {
      storeFailed = true;
      llvm::WithColor::warning(llvm::errs(), "modc")
          << "cannot store a kernel in the kernel cache " << root << " ("
          << ec.message() << ")\n";
    }
  }

private:
  static std::string checksum(llvm::StringRef bytes) {
    return llvm::toHex(llvm::SHA256::hash(llvm::arrayRefFromStringRef(bytes)),
                       /*LowerCase=*/true);
  }
  std::string root;
  bool storeFailed = false;
};
} // namespace

/// What nvcc says of its version (`nvcc --version`), part of the kernel
/// cache's key.
static std::string nvccVersion(llvm::StringRef nvcc, llvm::StringRef dir) {
  llvm::SmallString<256> out(dir);
  llvm::sys::path::append(out, "nvcc-version.txt");
  llvm::StringRef args[] = {nvcc, "--version"};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, out.str(),
                                                out.str()};
  int rc = llvm::sys::ExecuteAndWait(nvcc, args, std::nullopt, redirects);
  std::string version = fmt::format("exit {}\n", rc);
  if (auto buffer = llvm::MemoryBuffer::getFile(out))
    version += (*buffer)->getBuffer().str();
  fs::remove(out);
  return version;
}

/// Builds a CUDA package whose CUTLASS kernels are files of their own
/// (docs/cuda.md, "Compile time"): nvcc compiles model.cu and every kernel
/// file the cache does not hold into objects, up to `--jobs` processes at
/// once, then links them into libmodel.so. ptxas-report.txt holds
/// model.cu's report, then each kernel file's (stored with it in the
/// cache).
static llvm::Error
compileCudaKernels(const PackageOptions &opts, llvm::StringRef dir,
                   llvm::StringRef nvcc, llvm::ArrayRef<std::string> common,
                   llvm::ArrayRef<std::string> kernelFlags,
                   llvm::ArrayRef<CudaKernelFile> kernelFiles) {
  auto inDir = [&](llvm::StringRef file) {
    llvm::SmallString<256> p(dir);
    llvm::sys::path::append(p, file);
    return std::string(p);
  };
  // The key: everything that makes a kernel file's object.
  KernelCache cache;
  std::vector<std::string> keys;
  if (opts.kernelCache) {
    cache.open(KernelCache::directory(opts.kernelCacheDir));
    llvm::SHA256 base;
    auto add = [&](llvm::StringRef part) {
      base.update(part);
      base.update(llvm::StringRef("\0", 1));
    };
    llvm::SmallString<256> realNvcc;
    if (fs::real_path(nvcc, realNvcc))
      realNvcc = nvcc;
    add("modc-kernel-cache 1");
    add(realNvcc);
    add(nvccVersion(nvcc, dir));
    for (llvm::ArrayRef<std::string> flags : {common.drop_front(), kernelFlags})
      for (const std::string &flag : flags)
        add(flag);
    add(opts.cudaArch);
    add(cutlassVersion());
    // nvcc reads these on every run.
    for (const char *env : {"NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS"})
      add(llvm::sys::Process::GetEnv(env).value_or(""));
    std::array<uint8_t, 32> prefix = base.final();
    for (const CudaKernelFile &file : kernelFiles) {
      llvm::SHA256 key;
      key.update(prefix);
      key.update(file.text);
      keys.push_back(llvm::toHex(key.final(), /*LowerCase=*/true));
    }
  }

  // The kernel files the cache holds, and those nvcc compiles.
  std::vector<std::optional<std::string>> reports(kernelFiles.size());
  std::vector<size_t> misses;
  for (size_t i = 0; i < kernelFiles.size(); ++i) {
    std::string object =
        inDir(llvm::StringRef(kernelFiles[i].path).drop_back(3).str() + ".o");
    bool damaged = false;
    std::optional<std::pair<std::string, std::string>> hit;
    if (cache.enabled())
      hit = cache.load(keys[i], damaged);
    if (hit) {
      if (llvm::Error e = writeFile(
              object, [&](llvm::raw_ostream &os) { os << hit->first; },
              fs::OF_None))
        return e;
      reports[i] = hit->second;
      if (opts.verbose)
        llvm::errs() << "modc: " << kernelFiles[i].path
                     << " from the kernel cache (" << cache.pathOf(keys[i])
                     << ")\n";
      continue;
    }
    if (damaged && opts.verbose)
      llvm::errs() << "modc: the kernel cache's entry " << cache.pathOf(keys[i])
                   << " is damaged; compiling the kernel again\n";
    misses.push_back(i);
  }

  // nvcc's processes, at most --jobs at once: model.cu (on --jobs threads
  // of --split-compile) and the kernel files the cache did not hold.
  std::mutex mutex;
  std::vector<std::string> errors;
  std::vector<char> compiled(kernelFiles.size(), false);
  auto started = std::chrono::steady_clock::now();
  auto kernelsDone = started;
  // Compiles `stem`.cu into `stem`.o, its ptxas report into `stem`.log;
  // `kernel`: the index of a kernel file.
  auto compile = [&](const std::string &stem, llvm::ArrayRef<std::string> flags,
                     std::optional<size_t> kernel) {
    llvm::SmallVector<std::string> args(common.begin(), common.end());
    args.append(flags.begin(), flags.end());
    args.append({"-c", "-o", stem + ".o", stem + ".cu"});
    llvm::Error e = runLogged(args, stem + ".log", opts.verbose, "CUDA");
    std::lock_guard<std::mutex> lock(mutex);
    if (e)
      errors.push_back(llvm::toString(std::move(e)));
    else if (kernel)
      compiled[*kernel] = true;
    if (kernel)
      kernelsDone = std::max(kernelsDone, std::chrono::steady_clock::now());
  };
  {
    llvm::DefaultThreadPool pool(llvm::hardware_concurrency(opts.cudaJobs));
    std::string splitCompile =
        "--split-compile=" + std::to_string(opts.cudaJobs);
    pool.async([&, splitCompile] {
      compile(inDir("model"), {splitCompile}, std::nullopt);
    });
    for (size_t i : misses)
      pool.async([&, i] {
        compile(inDir(llvm::StringRef(kernelFiles[i].path).drop_back(3)),
                kernelFlags, i);
      });
    pool.wait();
  }
  // Every kernel nvcc compiled goes into the cache, even where another
  // file failed: the next compile needs it again.
  for (size_t i : misses) {
    if (!compiled[i])
      continue;
    std::string stem = inDir(llvm::StringRef(kernelFiles[i].path).drop_back(3));
    auto object = llvm::MemoryBuffer::getFile(stem + ".o", /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    auto report = llvm::MemoryBuffer::getFile(stem + ".log");
    if (!object || !report || (*object)->getBufferSize() == 0) {
      errors.push_back("compiling the generated CUDA failed (nvcc wrote no "
                       "object for " +
                       kernelFiles[i].path + ")");
      continue;
    }
    reports[i] = (*report)->getBuffer().str();
    if (cache.enabled())
      cache.store(keys[i], (*object)->getBuffer(), *reports[i]);
  }
  if (!errors.empty())
    return makeError(errors.front());
  llvm::errs() << fmt::format(
      "modc: CUTLASS kernels: {} distinct, {} from cache{}, {} compiled in "
      "{:.1f} s\n",
      kernelFiles.size(), kernelFiles.size() - misses.size(),
      cache.enabled() ? "" : " (no kernel cache)", misses.size(),
      std::chrono::duration<double>(kernelsDone - started).count());

  // The library, and the report of every kernel.
  llvm::SmallVector<std::string> link = {nvcc.str(),
                                         "-shared",
                                         "-cudart",
                                         "static",
                                         "-Xcompiler",
                                         "-fPIC,-fvisibility=hidden",
                                         "-o",
                                         inDir("libmodel.so"),
                                         inDir("model.o")};
  for (const CudaKernelFile &file : kernelFiles)
    link.push_back(inDir(llvm::StringRef(file.path).drop_back(3).str() + ".o"));
  if (llvm::Error e = runLogged(link, inDir("link.log"), opts.verbose, "CUDA"))
    return e;
  std::string report;
  if (auto model = llvm::MemoryBuffer::getFile(inDir("model.log")))
    report = (*model)->getBuffer().str();
  for (size_t i = 0; i < kernelFiles.size(); ++i)
    report += fmt::format(
        "modc: {} ({}):\n{}", kernelFiles[i].path,
        llvm::is_contained(misses, i) ? "compiled" : "from the kernel cache",
        *reports[i]);
  if (llvm::Error e = writeFile(inDir("ptxas-report.txt"),
                                [&](llvm::raw_ostream &os) { os << report; }))
    return e;
  // The package keeps the sources, not the objects.
  for (const char *file : {"model.o", "model.log", "link.log"})
    fs::remove(inDir(file));
  for (const CudaKernelFile &file : kernelFiles) {
    std::string stem = inDir(llvm::StringRef(file.path).drop_back(3));
    fs::remove(stem + ".o");
    fs::remove(stem + ".log");
  }
  return llvm::Error::success();
}

static llvm::Error
compileCudaSource(const PackageOptions &opts, llvm::StringRef dir,
                  llvm::ArrayRef<std::string> extraFlags,
                  llvm::ArrayRef<CudaKernelFile> kernelFiles) {
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
  if (!kernelFiles.empty()) {
    llvm::SmallVector<std::string> common = {
        *nvcc,     "-std=c++17", "-O3",
        gencode,   "-Xcompiler", "-fPIC,-fvisibility=hidden",
        "-Xptxas", "-v"};
    return compileCudaKernels(opts, dir, *nvcc, common, extraFlags,
                              kernelFiles);
  }
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
  std::vector<CudaKernelFile> kernelFiles;
  if (llvm::Error e = writeFile(source, [&](llvm::raw_ostream &os) {
        emitted =
            succeeded(cuda ? emitCuda(module, os, opts.cudaArch, &kernelFiles)
                           : emitCpp(module, os, &*cpuIsa));
      }))
    return e;
  if (!emitted)
    return makeError(cuda ? "CUDA emission failed" : "C++ emission failed");
  // The CUTLASS kernels, each a translation unit of its own.
  if (!kernelFiles.empty())
    if (std::error_code ec = fs::create_directory(inTemp("kernels")))
      return makeError("cannot create " + inTemp("kernels") + ": " +
                       ec.message());
  for (const CudaKernelFile &file : kernelFiles)
    if (llvm::Error e = writeFile(
            inTemp(file.path), [&](llvm::raw_ostream &os) { os << file.text; }))
      return e;
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
  if (llvm::Error e =
          cuda ? compileCudaSource(opts, temp.path, cutlassFlags, kernelFiles)
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
