//===- modc.cpp - The user's compiler driver ---------------------*- C++
//-*-===//
//
//   modc compile MODEL.json --target cpu -o PKG [--emit=mlir|modk|source]
//   modc compile MODEL.json --target cuda [--arch sm_90a|sm_80] -o PKG
//   modc import-hf DIR -o MODEL.json --weights W.safetensors [MoD options]
//
// Reads a model description (or a .mlir file holding a mod.model), runs the
// mod-to-modk pipeline and writes a package directory, or stops early and
// prints the requested stage. import-hf turns a Hugging Face Llama
// checkpoint into a model description and weights (docs/huggingface.md).
//
//===----------------------------------------------------------------------===//

#include "modc/Frontend/HfImport.h"
#include "modc/Frontend/ModelImporter.h"
#include "modc/InitAll.h"
#include "modc/Target/Package.h"
#include "modrt/Error.h"
#include "modrt/Tokenizer.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"

using namespace mlir;
namespace cl = llvm::cl;

static cl::SubCommand compileCommand("compile",
                                     "Compile a model description to a package");
/// modc's own options; --help shows these and hides LLVM's internal ones.
static cl::OptionCategory modcCategory("modc compile options");

static cl::opt<std::string> inputFile(cl::Positional, cl::desc("MODEL.json"),
                                      cl::Required, cl::sub(compileCommand), cl::cat(modcCategory));
static cl::opt<std::string> outputDir("o", cl::desc("Package directory to write"),
                                      cl::value_desc("PKG"),
                                      cl::sub(compileCommand), cl::cat(modcCategory));
static cl::opt<std::string> target("target", cl::desc("cpu (default) or cuda"),
                                   cl::init("cpu"), cl::sub(compileCommand), cl::cat(modcCategory));
enum class EmitStage { Mlir, Modk, Source, Package };
static cl::opt<EmitStage> emitStage(
    "emit", cl::desc("Stop after this stage and print it"),
    cl::values(clEnumValN(EmitStage::Mlir, "mlir", "the mod dialect"),
               clEnumValN(EmitStage::Modk, "modk", "the planned modk dialect"),
               clEnumValN(EmitStage::Source, "source", "the generated C++"),
               clEnumValN(EmitStage::Package, "package",
                          "a package directory (default)")),
    cl::init(EmitStage::Package), cl::sub(compileCommand), cl::cat(modcCategory));
static cl::opt<std::string> cxx("cxx", cl::desc("Host C++ compiler"),
                                cl::init(""), cl::sub(compileCommand), cl::cat(modcCategory));
static cl::opt<std::string> cpuArch("march",
                                    cl::desc("CPU for -march: native "
                                             "(default), or x86-64-v3 for a "
                                             "package that moves between "
                                             "machines"),
                                    cl::init("native"), cl::sub(compileCommand), cl::cat(modcCategory));
static cl::opt<std::string> cudaArch("arch",
                                     cl::desc("CUDA architecture: sm_90a "
                                              "(default) or sm_80"),
                                     cl::init("sm_90a"), cl::sub(compileCommand), cl::cat(modcCategory));
static cl::opt<std::string> nvcc("nvcc", cl::desc("CUDA compiler"),
                                 cl::init(""), cl::sub(compileCommand), cl::cat(modcCategory));
static cl::opt<unsigned> cudaJobs(
    "jobs",
    cl::desc("nvcc's processes at once (--target cuda: model.cu and the "
             "CUTLASS kernel files) and the threads of model.cu's "
             "--split-compile: 0, the default, one per CPU"),
    cl::init(0), cl::sub(compileCommand), cl::cat(modcCategory));
static cl::opt<std::string> kernelCache(
    "kernel-cache",
    cl::desc("The kernel cache's directory (--target cuda: the CUTLASS "
             "kernels' objects); default $MODC_CACHE_DIR, else "
             "$XDG_CACHE_HOME/modc/kernels, else ~/.cache/modc/kernels"),
    cl::value_desc("DIR"), cl::init(""), cl::sub(compileCommand),
    cl::cat(modcCategory));
static cl::opt<bool> noKernelCache(
    "no-kernel-cache",
    cl::desc("Compile every CUTLASS kernel, and store none (--target cuda)"),
    cl::init(false), cl::sub(compileCommand), cl::cat(modcCategory));
static cl::opt<std::string> cudaEmulation(
    "cuda-emulation",
    cl::desc("Tests only: build --target cuda with the host C++ compiler "
             "against the CPU emulation of CUDA in DIR"),
    cl::value_desc("DIR"), cl::init(""), cl::Hidden, cl::sub(compileCommand), cl::cat(modcCategory));
static cl::opt<std::string> cudaEmulationOpt(
    "cuda-emulation-opt",
    cl::desc("Tests only: --cuda-emulation's optimisation level (-O<LEVEL>)"),
    cl::value_desc("LEVEL"), cl::init("g"), cl::Hidden,
    cl::sub(compileCommand), cl::cat(modcCategory));
static cl::opt<bool> f32Activations(
    "f32-activations",
    cl::desc("Tests only: keep a bf16 model's activation buffers f32 arrays "
             "(the same values in twice the bytes), to compare with"),
    cl::init(false), cl::Hidden, cl::sub(compileCommand), cl::cat(modcCategory));
static cl::opt<bool> f32Weights(
    "f32-weights",
    cl::desc("bf16 models on CUDA: keep no bf16 copy of the weights between "
             "calls (less device memory; the same results): AdamW updates "
             "the f32 weights only, decode streams them as f32, and each "
             "call rounds again the weights its TMA products read"),
    cl::init(false), cl::sub(compileCommand), cl::cat(modcCategory));
static cl::list<std::string> noFuse(
    "no-fuse",
    cl::desc("Fusions to leave out, to measure them: routing (a routed "
             "block's gather and its attention norm, as one kernel), "
             "residual (the routed block's MLP and attention sum, into its "
             "gated scatter), residual-add (into the "
             "GEMM that produces the sum's operand), activation (the MLP's, "
             "into its up projection), rows-epilogue (an elementwise row "
             "kernel into the GEMM it reads: the routed block's gated "
             "scatter, into its down projection; residual-add and "
             "activation leave such kernels at their own rows unfused "
             "too), router-norm (a routed block's RMSNorm statistics, into "
             "its router's pass over every token), select-gather (a routed "
             "block's gather of its selected rows, into the kernel that "
             "selects them), horizontal (Q, K and V, and the gate and up "
             "projections, each as one stacked product; CPU targets), copy "
             "(a whole buffer's copy, into the row kernel that wrote its "
             "source), group (independent products of one shape, such as "
             "an MoE layer's experts, and the experts' row kernels, each "
             "as one grouped launch, or one parallel region on the CPU), "
             "siblings (a decode "
             "step's products of one input, such as Q, K and V, as one "
             "launch of the few-row kernel; CUDA targets), zero-fill (a "
             "weight gradient's zero fill, into its "
             "first product, which then writes it; CPU targets)"),
    cl::value_desc("FUSION,..."), cl::CommaSeparated, cl::sub(compileCommand),
    cl::cat(modcCategory));
static cl::opt<std::string> cudaGemms(
    "cuda-gemms",
    cl::desc("The CUDA products' kernels: tiles (the hand-written ones, the "
             "default) or cutlass (CUTLASS kernels for the bf16 products "
             "on sm_90a and sm_80: the forward ones, their epilogues "
             "(residual add, SwiGLU, GELU, a bf16 store, the routed "
             "block's gated scatter) as epilogue visitor trees, the input "
             "and weight gradients, and the MoE experts' groups as grouped "
             "launches (on sm_80 their gradients'); the tiles where CUTLASS "
             "declines; not yet run on a GPU), then "
             "modk-configure-gemms' options that pin choices for tests and "
             "benchmarks, e.g. 'cutlass tile=large', 'path=mma tma=false' "
             "or 'tiles attention=wgmma' (sm_90a's TMA and wgmma attention "
             "forward; not yet run on a GPU) (docs/cuda.md)"),
    cl::value_desc("tiles|cutlass [OPTIONS]"), cl::init(""),
    cl::sub(compileCommand), cl::cat(modcCategory));
static cl::opt<std::string> tokenizerFile(
    "tokenizer",
    cl::desc("A Hugging Face tokenizer.json to place in the package as its "
             "tokenizer (manifest key \"tokenizer\"), which modrun then "
             "uses by default"),
    cl::value_desc("FILE"), cl::init(""), cl::sub(compileCommand),
    cl::cat(modcCategory));
static cl::opt<bool> verbose("v", cl::desc("Show the commands run"),
                             cl::sub(compileCommand), cl::cat(modcCategory));

static cl::SubCommand importHfCommand(
    "import-hf",
    "Import a Hugging Face Llama checkpoint (docs/huggingface.md)");
static cl::OptionCategory importCategory("modc import-hf options");
static cl::opt<std::string> hfDir(cl::Positional, cl::desc("DIR"), cl::Required,
                                  cl::sub(importHfCommand),
                                  cl::cat(importCategory));
static cl::opt<std::string> hfModelOut("o",
                                       cl::desc("Model description to write"),
                                       cl::value_desc("MODEL.json"),
                                       cl::sub(importHfCommand),
                                       cl::cat(importCategory));
static cl::opt<std::string>
    hfWeightsOut("weights", cl::desc("Weights file to write (F32)"),
                 cl::value_desc("W.safetensors"), cl::sub(importHfCommand),
                 cl::cat(importCategory));
static cl::opt<std::string>
    hfName("name", cl::desc("The model's name (default: DIR's name)"),
           cl::sub(importHfCommand), cl::cat(importCategory));
static cl::opt<int64_t> hfSeqLen(
    "seq-len",
    cl::desc("seq_len (default: max_position_embeddings, at most 1024)"),
    cl::sub(importHfCommand), cl::cat(importCategory));
static cl::opt<std::string> hfDtype("dtype",
                                    cl::desc("The model's dtype: f32 "
                                             "(default) or bf16"),
                                    cl::init("f32"), cl::sub(importHfCommand),
                                    cl::cat(importCategory));
static cl::opt<double> hfCapacity(
    "capacity",
    cl::desc("Mixture-of-Depths: the fraction of seq_len a routed layer "
             "processes (MoD is off without this or --capacity-tokens)"),
    cl::sub(importHfCommand), cl::cat(importCategory));
static cl::opt<int64_t>
    hfCapacityTokens("capacity-tokens",
                     cl::desc("Mixture-of-Depths: the tokens a routed layer "
                              "processes per sequence"),
                     cl::sub(importHfCommand), cl::cat(importCategory));
static cl::opt<std::string> hfSchedule(
    "schedule",
    cl::desc("Routed layers: every_other (default), all, none or a list "
             "such as 1,3"),
    cl::init("every_other"), cl::sub(importHfCommand), cl::cat(importCategory));
static cl::opt<std::string> hfGate("gate",
                                   cl::desc("linear, sigmoid (default) or one"),
                                   cl::init("sigmoid"),
                                   cl::sub(importHfCommand),
                                   cl::cat(importCategory));
static cl::opt<std::string> hfCausalRouter(
    "causal-router", cl::desc("predictor (default), aux_loss or none"),
    cl::init("predictor"), cl::sub(importHfCommand), cl::cat(importCategory));
static cl::opt<double> hfAuxLossWeight("aux-loss-weight",
                                       cl::desc("mod.aux_loss_weight"),
                                       cl::sub(importHfCommand),
                                       cl::cat(importCategory));
static cl::opt<int64_t>
    hfPredictorHidden("predictor-hidden",
                      cl::desc("mod.predictor_hidden (default d_model)"),
                      cl::sub(importHfCommand), cl::cat(importCategory));
static cl::opt<uint64_t>
    hfSeed("seed", cl::desc("Seed of the predictors' initial values"),
           cl::init(0), cl::sub(importHfCommand), cl::cat(importCategory));

static int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "modc") << message << "\n";
  return 1;
}

static int runCompile() {
  MLIRContext context;
  DialectRegistry registry;
  modc::registerAllDialects(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();

  if (target != "cpu" && target != "cuda")
    return fail("--target must be cpu or cuda, got '" + target + "'");
  if (target == "cuda" && !modc::isSupportedCudaArch(cudaArch))
    return fail("--arch must be sm_90a or sm_80, got '" + cudaArch + "'");
  if (target == "cpu" && cudaArch.getNumOccurrences())
    return fail("--arch is for --target cuda; the CPU target takes --march");
  if (target == "cpu" && cudaJobs.getNumOccurrences())
    return fail("--jobs is for --target cuda (nvcc's threads)");
  if (target == "cpu" &&
      (kernelCache.getNumOccurrences() || noKernelCache.getNumOccurrences()))
    return fail("--kernel-cache and --no-kernel-cache are for --target cuda "
                "(CUTLASS kernels)");
  if (kernelCache.getNumOccurrences() && noKernelCache)
    return fail("give --kernel-cache DIR or --no-kernel-cache, not both");
  if (!llvm::is_contained({"0", "1", "2", "3", "g", "s"},
                          llvm::StringRef(cudaEmulationOpt)))
    return fail("--cuda-emulation-opt=" + cudaEmulationOpt +
                ": expected 0, 1, 2, 3, g or s");
  if (emitStage == EmitStage::Package && outputDir.empty())
    return fail("missing -o PKG (the package directory to write)");

  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input =
      mlir::openInputFile(inputFile, &error);
  if (!input)
    return fail(error);

  OwningOpRef<ModuleOp> module;
  if (llvm::StringRef(inputFile).ends_with(".mlir")) {
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
    module = parseSourceFile<ModuleOp>(sourceMgr, &context);
    if (!module)
      return fail("cannot parse " + inputFile);
  } else {
    auto imported = modc::importModelJson(input->getBuffer(), inputFile,
                                          &context);
    if (!imported)
      return fail(llvm::toString(imported.takeError()));
    module = std::move(*imported);
  }
  if (emitStage == EmitStage::Mlir) {
    module->print(llvm::outs());
    return 0;
  }
  modc::PipelineOptions pipeline;
  pipeline.bf16Storage = !f32Activations;
  pipeline.bf16WeightCopies = !f32Weights;
  for (const std::string &fusion : noFuse) {
    if (fusion == "routing")
      pipeline.fuseRouting = false;
    else if (fusion == "residual")
      pipeline.fuseResidual = false;
    else if (fusion == "residual-add")
      pipeline.fuseResidualAdd = false;
    else if (fusion == "activation")
      pipeline.fuseActivation = false;
    else if (fusion == "rows-epilogue")
      pipeline.fuseRowEpilogues = false;
    else if (fusion == "router-norm")
      pipeline.fuseRouterNorm = false;
    else if (fusion == "select-gather")
      pipeline.fuseSelectGather = false;
    else if (fusion == "horizontal")
      pipeline.fuseHorizontal = false;
    else if (fusion == "copy")
      pipeline.fuseCopies = false;
    else if (fusion == "group")
      pipeline.groupGemms = false;
    else if (fusion == "siblings")
      pipeline.groupSiblings = false;
    else if (fusion == "zero-fill")
      pipeline.foldZeroFills = false;
    else
      return fail("--no-fuse takes routing, residual, residual-add, "
                  "activation, rows-epilogue, router-norm, select-gather, "
                  "horizontal, copy, group, siblings and zero-fill, got '" +
                  fusion + "'");
  }
  if (target == "cuda") {
    if (llvm::StringRef(cudaGemms).contains("arch="))
      return fail("--cuda-gemms takes no arch=; use --arch");
    // The library first (tiles or cutlass), then the pass's own options.
    auto [library, options] = llvm::StringRef(cudaGemms).ltrim().split(' ');
    std::string passOptions = cudaGemms;
    if (library == "tiles" || library == "cutlass")
      passOptions = ("library=" + library + " " + options).str();
    pipeline.cudaGemms = "arch=" + cudaArch + " " + passOptions;
  } else if (!cudaGemms.empty()) {
    return fail("--cuda-gemms is for --target cuda");
  }
  // Passes run once an entry (forward, grad, decode, eval...), and a
  // problem of the model itself (a head too wide for the CUDA kernels)
  // comes from each entry alike: print each distinct diagnostic once. The
  // first of them goes on to MLIR's own printing (returning failure).
  llvm::StringSet<> reported;
  ScopedDiagnosticHandler onceEach(&context, [&](Diagnostic &diag) {
    std::string key;
    llvm::raw_string_ostream keyStream(key);
    keyStream << diag.getLocation() << ": " << diag.str();
    return success(!reported.insert(key).second);
  });
  PassManager pm(&context);
  std::string optionErrors;
  llvm::raw_string_ostream optionErrorStream(optionErrors);
  if (failed(modc::buildModToModkPipeline(pm, pipeline, optionErrorStream)))
    return fail("bad --cuda-gemms '" + cudaGemms + "': " +
                llvm::StringRef(optionErrors).trim());
  if (failed(pm.run(*module)))
    return fail("lowering " + inputFile + " failed");
  if (emitStage == EmitStage::Modk) {
    module->print(llvm::outs());
    return 0;
  }
  std::string hostCxx = !cxx.empty()          ? cxx.getValue()
                        : std::getenv("CXX") ? std::string(std::getenv("CXX"))
                                              : std::string("c++");
  if (emitStage == EmitStage::Source) {
    if (target == "cuda")
      return failed(modc::emitCuda(*module, llvm::outs(), cudaArch)) ? 1 : 0;
    // The embedded manifest names the ISA, as the package's would.
    llvm::Expected<modc::CpuIsa> isa = modc::queryCpuIsa(hostCxx, cpuArch);
    if (!isa)
      return fail(llvm::toString(isa.takeError()));
    return failed(modc::emitCpp(*module, llvm::outs(), &*isa)) ? 1 : 0;
  }

  modc::PackageOptions options;
  options.outputDir = outputDir;
  options.cxx = hostCxx;
  options.cpuArch = cpuArch;
  options.target = target;
  options.cudaArch = cudaArch;
  options.cudaJobs = cudaJobs;
  options.kernelCacheDir = kernelCache;
  options.kernelCache = !noKernelCache;
  options.nvcc = !nvcc.empty()          ? nvcc.getValue()
                 : std::getenv("NVCC") ? std::string(std::getenv("NVCC"))
                                       : std::string("nvcc");
  options.cudaEmulationDir = cudaEmulation;
  options.cudaEmulationOpt = cudaEmulationOpt;
  options.verbose = verbose;
  if (!tokenizerFile.empty()) {
    // Read and checked against the model's vocabulary before the long
    // compile, as modrun would read it.
    int64_t vocab = 0;
    module->walk([&](modc::modk::EntryOp entry) {
      vocab = entry.getModel().getVocabSize();
    });
    try {
      modrt::Tokenizer::fromFile(tokenizerFile).checkFits(vocab, inputFile);
    } catch (const modrt::Error &e) {
      return fail(std::string("--tokenizer: ") + e.what());
    }
    options.tokenizerFile = tokenizerFile;
  }
  if (llvm::Error e = modc::writePackage(*module, options))
    return fail(llvm::toString(std::move(e)));
  llvm::errs() << "modc: wrote package " << outputDir << "\n";
  return 0;
}

static int runImportHf() {
  if (hfModelOut.empty())
    return fail("missing -o MODEL.json (the model description to write)");
  if (hfWeightsOut.empty())
    return fail("missing --weights W.safetensors (the weights file to write)");
  if (hfDtype != "f32" && hfDtype != "bf16")
    return fail("--dtype must be f32 or bf16, got '" + hfDtype + "'");
  if (hfGate != "linear" && hfGate != "sigmoid" && hfGate != "one")
    return fail("--gate must be linear, sigmoid or one, got '" + hfGate + "'");
  if (hfCausalRouter != "predictor" && hfCausalRouter != "aux_loss" &&
      hfCausalRouter != "none")
    return fail("--causal-router must be predictor, aux_loss or none, got '" +
                hfCausalRouter + "'");
  bool mixtureOfDepths =
      hfCapacity.getNumOccurrences() || hfCapacityTokens.getNumOccurrences();
  for (const cl::Option *flag : std::initializer_list<const cl::Option *>{
           &hfSchedule, &hfGate, &hfCausalRouter, &hfAuxLossWeight,
           &hfPredictorHidden})
    if (flag->getNumOccurrences() && !mixtureOfDepths)
      return fail("--" + flag->ArgStr +
                  " needs --capacity or --capacity-tokens (without them the "
                  "import is dense)");
  if (hfPredictorHidden.getNumOccurrences() && hfCausalRouter != "predictor")
    return fail("--predictor-hidden is for --causal-router predictor");

  modc::HfImportOptions opts;
  opts.checkpointDir = hfDir;
  opts.name = hfName;
  if (hfSeqLen.getNumOccurrences())
    opts.seqLen = hfSeqLen;
  opts.dtype = hfDtype;
  if (hfCapacity.getNumOccurrences())
    opts.capacity = hfCapacity;
  if (hfCapacityTokens.getNumOccurrences())
    opts.capacityTokens = hfCapacityTokens;
  opts.schedule = hfSchedule;
  opts.gate = hfGate;
  opts.causalRouter = hfCausalRouter;
  if (hfAuxLossWeight.getNumOccurrences())
    opts.auxLossWeight = hfAuxLossWeight;
  if (hfPredictorHidden.getNumOccurrences())
    opts.predictorHidden = hfPredictorHidden;
  opts.seed = hfSeed;
  opts.progress = &llvm::errs();
  llvm::Expected<modc::HfImportResult> result = modc::importHfCheckpoint(opts);
  if (!result)
    return fail(llvm::toString(result.takeError()));

  // The description must be one `modc compile` accepts: the importer's own
  // validation (docs/model-format.md section 1) runs before anything is
  // written.
  MLIRContext context;
  DialectRegistry registry;
  modc::registerAllDialects(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  auto imported =
      modc::importModelJson(result->modelJson, hfModelOut, &context);
  if (!imported)
    return fail("the imported model is not one modc compiles: " +
                llvm::toString(imported.takeError()));

  if (llvm::Error e = modc::writeHfImport(*result, hfModelOut, hfWeightsOut))
    return fail(llvm::toString(std::move(e)));
  llvm::errs() << "modc: wrote " << hfModelOut << " and " << hfWeightsOut
               << " (" << result->weights.size() << " tensors)\n";
  return 0;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(modcCategory);
  cl::HideUnrelatedOptions(modcCategory, compileCommand);
  cl::HideUnrelatedOptions(importCategory, importHfCommand);
  cl::ParseCommandLineOptions(
      argc, argv,
      "modc: the Mixture-of-Depths compiler\n\n"
      "  modc compile MODEL.json --target cpu -o PKG\n"
      "  modc compile MODEL.json --target cuda [--arch sm_90a|sm_80] -o PKG\n"
      "  modc import-hf DIR -o MODEL.json --weights W.safetensors [MoD "
      "options]\n");
  if (compileCommand)
    return runCompile();
  if (importHfCommand)
    return runImportHf();
  return fail("missing command; try 'modc compile --help'");
}
