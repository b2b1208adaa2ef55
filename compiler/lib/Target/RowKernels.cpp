//===- RowKernels.cpp - Kernels generated from modk.rows --------*- C++ -*-===//
//
// A modk.rows op carries its math as arith and math ops (modk-generalize).
// Both emitters turn those regions into code the same way: one C statement
// per op, the row's sums first, then what depends only on the sums (once a
// row), then the elements. Only the loops around the statements differ:
//
//  - CPU: rows in parallel (OpenMP), columns in `omp simd` loops;
//  - CUDA: a warp per row, lanes over columns, sums by warp shuffles.
//
// Identical ops (one per layer, usually) share one kernel.
//
//===----------------------------------------------------------------------===//

#include "PlanEmitter.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <fmt/format.h>

using namespace mlir;
using namespace modc;

namespace {
/// The widest row a CUDA block-per-rows kernel keeps in registers: 16
/// columns a thread of 256.
constexpr int64_t kMaxRegisterWidth = 16 * 256;

/// A float constant as a C++ literal that reads back the same float.
FailureOr<std::string> floatConstant(arith::ConstantOp op) {
  auto attr = dyn_cast<FloatAttr>(op.getValue());
  if (!attr || !attr.getType().isF32())
    return op.emitOpError("in a kernel region must be an f32 constant"),
           failure();
  double v = attr.getValueAsDouble();
  if (!std::isfinite(v))
    return op.emitOpError("non-finite constants are not supported in "
                          "kernel regions"),
           failure();
  return fmt::format("{:#.9g}f", v);
}

/// `value` as stored into `output`'s elements: bf16 rounded by the target
/// namespace's bf16, anything else as it is.
std::string storedValue(Value output, StringRef value, bool cuda) {
  Type element = cast<MemRefType>(output.getType()).getElementType();
  return element.isBF16() ? fmt::format("{}::bf16({})",
                                        cuda ? "modk_cuda" : "modk_cpu",
                                        value.str())
                          : value.str();
}

/// The statements of a kernel region: one C statement per arith or math
/// op, over names of the block's arguments that the kernel gives them.
class KernelStatements {
public:
  explicit KernelStatements(bool cuda) : cuda(cuda) {}

  /// The C expression of `v`: a named value or a literal.
  std::string operator[](Value v) const { return names.lookup(v); }
  /// Gives `v` (a block argument) the C name `name`.
  void setName(Value v, std::string name) { names[v] = std::move(name); }

  /// Whether `o` depends on no element (only on a row's sums, the step's
  /// scalars and constants): computed once, before the element loop.
  bool rowInvariant(Operation &o) const { return invariant.contains(&o); }

  /// Marks the ops of `body` that depend only on the arguments
  /// `invariantArg` accepts.
  void findInvariants(Block &body,
                      function_ref<bool(BlockArgument)> invariantArg) {
    invariant = modk::invariantOps(body, invariantArg);
  }

  /// Writes `const float tN = ...;` for every op of `block` that `pick`
  /// accepts, in order.
  LogicalResult writeOps(Block &block, function_ref<bool(Operation &)> pick,
                         int indent, llvm::raw_ostream &os) {
    for (Operation &o : block.without_terminator()) {
      if (!pick(o))
        continue;
      if (auto angle = dyn_cast<modk::RopeAngleOp>(o)) {
        // The loops around the statements name the element's angle.
        names[angle.getCos()] = "rope_cos";
        names[angle.getSin()] = "rope_sin";
        continue;
      }
      if (auto constant = dyn_cast<arith::ConstantOp>(o)) {
        FailureOr<std::string> literal = floatConstant(constant);
        if (failed(literal))
          return failure();
        names[constant.getResult()] = *literal;
        continue;
      }
      FailureOr<std::string> expr = expression(o);
      if (failed(expr))
        return failure();
      std::string name = fmt::format("t{}", next++);
      // A condition (arith.cmpf) is a bool; every other value an f32, but
      // for the gradient norm's f64 terms.
      Type type = o.getResult(0).getType();
      os << fmt::format("{:{}}const {} {} = {};\n", "", indent,
                        type.isInteger(1) ? "bool"
                        : type.isF64()    ? "double"
                                          : "float",
                        name, *expr);
      names[o.getResult(0)] = name;
    }
    return success();
  }

  /// The C expression of the row set's row count where modk.row_count
  /// may be read (none: a kernel that does not know it).
  void setRowCount(std::string expr) { rowCount = std::move(expr); }

  /// Gives modk.rotate_half of `arg` (an input's element) the C
  /// expression `expr`: the element at the partner column, signed.
  void setPartner(Value arg, std::string expr) {
    partners[arg] = std::move(expr);
  }

protected:
  bool cuda;
  llvm::DenseMap<Value, std::string> names;
  llvm::DenseMap<Value, std::string> partners;
  std::string rowCount;

private:
  /// The C expression of one arith or math op over its operands' names.
  FailureOr<std::string> expression(Operation &o) {
    auto operand = [&](unsigned i) { return names.lookup(o.getOperand(i)); };
    auto binary = [&](const char *sym) {
      return fmt::format("{} {} {}", operand(0), sym, operand(1));
    };
    // The math library of each target: the CPU's exp is the prelude's
    // vectorisable one (the loops stay SIMD), CUDA's the device's.
    auto call = [&](const char *cpu, const char *device) {
      return fmt::format("{}({})", cuda ? device : cpu, operand(0));
    };
    // CUDA: sums, differences and products rounded each (no contraction
    // into fused multiply-adds), so that the same math gives the same bits
    // in every kernel it is generated into: a GEMM's epilogue, or a kernel
    // of its own (nvcc contracts by context; a RoPE pair differed).
    // f64 values (the gradient norm's terms) take the double intrinsic.
    auto rounded = [&](const char *sym, const char *f32Intrinsic,
                       const char *f64Intrinsic) {
      const char *intrinsic =
          o.getResult(0).getType().isF64() ? f64Intrinsic : f32Intrinsic;
      return cuda ? fmt::format("{}({}, {})", intrinsic, operand(0),
                                operand(1))
                  : binary(sym);
    };
    return llvm::TypeSwitch<Operation *, FailureOr<std::string>>(&o)
        .Case([&](arith::AddFOp) {
          return rounded("+", "__fadd_rn", "__dadd_rn");
        })
        .Case([&](arith::SubFOp) {
          return rounded("-", "__fsub_rn", "__dsub_rn");
        })
        .Case([&](arith::MulFOp) {
          return rounded("*", "__fmul_rn", "__dmul_rn");
        })
        .Case([&](arith::DivFOp) { return binary("/"); })
        .Case([&](arith::NegFOp) { return "-" + operand(0); })
        .Case([&](math::ExpOp) {
          return call("modk_cpu::detail::expLanes", "expf");
        })
        .Case([&](math::ErfOp) { return call("std::erf", "erff"); })
        .Case([&](math::SqrtOp) { return call("std::sqrt", "sqrtf"); })
        .Case([&](math::TanhOp) { return call("std::tanh", "tanhf"); })
        .Case([&](math::LogOp) { return call("std::log", "logf"); })
        .Case([&](math::Log1pOp) { return call("std::log1p", "log1pf"); })
        .Case([&](math::AbsFOp) { return call("std::fabs", "fabsf"); })
        // A rounding to bf16 (the verifier lets only arith.extf read it):
        // the rounded value, held as the f32 it reads back as.
        .Case([&](arith::TruncFOp) {
          return call("modk_cpu::bf16_round", "modk_cuda::detail::bf16Round");
        })
        .Case([&](arith::ExtFOp ext) -> std::string {
          // Back from a bf16 rounding, an f32 already; or widened to f64.
          if (ext.getType().isF64())
            return fmt::format("static_cast<double>({})", operand(0));
          return operand(0);
        })
        .Case([&](arith::MaxNumFOp) {
          return fmt::format("{}({}, {})", cuda ? "fmaxf" : "std::fmax",
                             operand(0), operand(1));
        })
        .Case([&](arith::SelectOp) {
          return fmt::format("{} ? {} : {}", operand(0), operand(1),
                             operand(2));
        })
        .Case([&](arith::CmpFOp cmp) -> FailureOr<std::string> {
          // C's ==, <, <=, >, >= are false where a side is NaN (ordered),
          // and != is true there (unordered).
          using P = arith::CmpFPredicate;
          switch (cmp.getPredicate()) {
          case P::OEQ:
            return binary("==");
          case P::OGT:
            return binary(">");
          case P::OGE:
            return binary(">=");
          case P::OLT:
            return binary("<");
          case P::OLE:
            return binary("<=");
          case P::UNE:
            return binary("!=");
          default:
            return cmp.emitOpError("has no code generator for predicate ")
                       << arith::stringifyCmpFPredicate(cmp.getPredicate()),
                   failure();
          }
        })
        .Case([&](modk::RotateHalfOp half) -> FailureOr<std::string> {
          std::string partner = partners.lookup(half.getElement());
          if (partner.empty())
            return half.emitOpError("cannot be read in this kernel: it does "
                                    "not pair the columns of a head"),
                   failure();
          return partner;
        })
        .Case([&](modk::ColumnOp) -> FailureOr<std::string> {
          return std::string("static_cast<float>(c)");
        })
        .Case([&](modk::RowCountOp count) -> FailureOr<std::string> {
          if (rowCount.empty())
            return count.emitOpError("cannot be read in this kernel: it "
                                     "does not know its row count"),
                   failure();
          return fmt::format("static_cast<float>({})", rowCount);
        })
        .Default([&](Operation *other) -> FailureOr<std::string> {
          return other->emitOpError("has no code generator in a kernel "
                                    "region"),
                 failure();
        });
  }

  llvm::SmallPtrSet<Operation *, 16> invariant;
  int next = 0;
};

/// The statements of one modk.rows kernel, written from its regions, with
/// the loads and stores of its row buffers.
class RowStatements : public KernelStatements {
public:
  /// `epilogue`: the statements of a GEMM's epilogue functor, where the
  /// input that is the region's argument is the product's element in
  /// registers, `acc`, never loaded. (As a row kernel, the CPU's form, that
  /// input is a staged buffer like any other.)
  RowStatements(modk::RowsOp op, bool cuda, bool epilogue = false)
      : KernelStatements(cuda), op(op) {
    if (epilogue)
      for (auto [j, in] : llvm::enumerate(op.getInputs()))
        if (isa<BlockArgument>(in))
          accInput = j;
  }

  /// Names block arguments: `x<j>` for the inputs' elements, then
  /// `max<k>` for the row's maxima and `sum<k>` for its sums.
  void nameArguments(Block &block) {
    unsigned inputs = op.getInputs().size(), maxima = op.getNumMaxima();
    for (BlockArgument arg : block.getArguments()) {
      unsigned n = arg.getArgNumber();
      names[arg] = n == accInput     ? std::string("acc")
                   : n < inputs      ? fmt::format("x{}", n)
                   : n < inputs + maxima ? fmt::format("max{}", n - inputs)
                                         : fmt::format("sum{}",
                                                       n - inputs - maxima);
    }
  }

  void findRowInvariants(Block &body) {
    // A row's sums and its token's scalars are the same for every element.
    findInvariants(body, [&](BlockArgument arg) {
      return op.isRowInvariantArgument(arg);
    });
  }

  /// Writes the loads of the input elements that the ops `pick` accepts
  /// (or the block's yield) read at row `row`, column `col`.
  void writeLoads(Block &block, function_ref<bool(Operation &)> pick,
                  StringRef row, StringRef col, int indent,
                  llvm::raw_ostream &os) {
    unsigned inputs = op.getInputs().size();
    int64_t width = op.getWidth();
    llvm::SetVector<unsigned> used;
    for (Operation &o : block)
      if (o.hasTrait<OpTrait::IsTerminator>() || pick(o))
        for (Value v : o.getOperands())
          if (auto arg = dyn_cast<BlockArgument>(v))
            if (arg.getArgNumber() < inputs)
              used.insert(arg.getArgNumber());
    for (unsigned j : used) {
      if (loadedOnceARow(j) || accInput == j)
        continue; // loaded once a row (writeTokenIndex), or in registers
      bool perColumn = op.getInputAccessAt(j) == modk::Access::column;
      if (inRegisters) {
        os << fmt::format("{:{}}const float x{} = {}{}[j];\n", "", indent, j,
                          perColumn ? "v" : "r", j);
        continue;
      }
      std::string load =
          perColumn     ? fmt::format("in{}[{}]", j, col.str())
          : rowPointers ? fmt::format("rin{}[{}]", j, col.str())
                        : fmt::format("in{}[{} * {} + {}]", j, rowOf(j, row),
                                      rowStride(j), col.str());
      os << fmt::format("{:{}}const float x{} = static_cast<float>({});\n",
                        "", indent, j, load);
    }
  }

  /// Writes pointers to row `row` of each row buffer read or written an
  /// element at a time (rin<j>, rout<k>), which the loads and stores then
  /// index by column: GCC vectorises `rin0[c]` as contiguous loads where
  /// it turned `in0[i * W + c]` into gathers (bench/RESULTS.md).
  void writeRowPointers(StringRef row, int indent, llvm::raw_ostream &os) {
    // The element types are the kernel parameters' (rowKernelParamList).
    unsigned nIn = op.getInputs().size();
    int64_t width = op.getWidth();
    for (unsigned j : elementInputs(/*vectors=*/false))
      os << fmt::format("{:{}}const auto *rin{} = in{} + {} * {};\n", "",
                        indent, j, j, rowOf(j, row), rowStride(j));
    for (unsigned k = 0, e = op.getOutputs().size(); k < e; ++k)
      if (op.isStoredPerElement(k))
        os << fmt::format("{:{}}auto *rout{} = out{} + {} * {};\n", "",
                          indent, k, k, rowOf(nIn + k, row),
                          rowStride(nIn + k));
    rowPointers = true;
  }

  /// Keeps the inputs' elements in per-thread register arrays indexed by
  /// the thread's column slot j (a block-per-rows CUDA kernel): the vectors
  /// once, a row's elements once a row (writeRegisterArrays), read by both
  /// the sums and the element loop.
  void keepInRegisters() { inRegisters = true; }

  /// Whether a block-per-rows CUDA thread visits its columns by slot j
  /// (unrolled), because registers are indexed by it: the row's elements
  /// kept in registers, or the column sums' accumulators. Otherwise it
  /// walks them in a plain strided loop (a wide row read from memory:
  /// unrolling 125 columns a thread of a 32000-class row spilled).
  bool usesColumnSlots() {
    return inRegisters || llvm::any_of(op.getRowSumOutputs(), [&](unsigned k) {
             return op.getOutputAccessAt(k) == modk::Access::column_sum;
           });
  }

  /// The caller knows the row's sequence, `seq` (a gather a sequence at a
  /// time): no search of the segments.
  void giveSequence() { sequenceGiven = true; }

  /// On the CPU, the element loop visits columns [lo, hi) (expressions)
  /// rather than the whole row: a scatter-add's thread owns a block.
  void visitColumns(std::string lo, std::string hi) {
    columnRange = {std::move(lo), std::move(hi)};
  }
  /// The column range visitColumns set, if any.
  const std::optional<std::pair<std::string, std::string>> &
  visitedColumns() const {
    return columnRange;
  }

  /// The inputs read one element at a time (not once a row, not the
  /// product in registers), of the vectors or of the row buffers.
  SmallVector<unsigned> elementInputs(bool vectors) {
    SmallVector<unsigned> inputs;
    for (auto [j, in] : llvm::enumerate(op.getInputs())) {
      if (loadedOnceARow(j) || accInput == j ||
          (op.getInputAccessAt(j) == modk::Access::column) != vectors)
        continue;
      bool used = false;
      for (Region *region : {&op.getMaxima(), &op.getReduce(), &op.getBody()})
        for (Block &block : *region)
          used |= !block.getArgument(j).use_empty();
      if (used)
        inputs.push_back(j);
    }
    return inputs;
  }

  /// Writes the loads of the `vectors` inputs (or the row buffers' elements
  /// at row `row`) into register arrays v<j> (r<j>) of CT columns a thread.
  void writeRegisterArrays(bool vectors, StringRef row, int indent,
                           llvm::raw_ostream &os) {
    SmallVector<unsigned> inputs = elementInputs(vectors);
    if (inputs.empty() || !inRegisters)
      return;
    std::string pad(indent, ' ');
    int64_t width = op.getWidth();
    for (unsigned j : inputs)
      os << fmt::format("{}float {}{}[CT];\n", pad, vectors ? "v" : "r", j);
    os << fmt::format("#pragma unroll\n{0}for (int j = 0; j < CT; ++j) {{\n"
                      "{0}  const int c = threadIdx.x + j * T;\n",
                      pad);
    for (unsigned j : inputs) {
      std::string index =
          vectors ? std::string("c")
                  : fmt::format("{} * {} + c", rowOf(j, row), rowStride(j));
      os << fmt::format(
          "{0}  {1}{2}[j] = c < {3} ? static_cast<float>(in{2}[{4}]) "
          ": 0.0f;\n",
          pad, vectors ? "v" : "r", j, width, index);
    }
    os << pad << "}\n";
  }

  /// The elements from one row of operand `index` (of the inputs, then the
  /// outputs) to the next: its width, or a column window's source row.
  int64_t rowStride(unsigned index) {
    return modk::ColumnWindowOp::rowStride(
        cast<MemRefType>(op.getInputOrOutput(index).getType()));
  }

  /// The row of operand `index` (of the inputs, then the outputs) that row
  /// `row` of the row set reads or writes: the row itself, or its token
  /// `seq * T + pos` (writeTokenIndex).
  std::string rowOf(unsigned index, StringRef row) {
    switch (op.getAccess(index)) {
    case modk::Access::table:
    case modk::Access::scatter:
      // The table's row (writeTokenIndex).
      return fmt::format("id{}", *op.getIdsInput());
    case modk::Access::token:
    case modk::Access::token_value: {
      int64_t tokens =
          cast<MemRefType>(op.getInputOrOutput(index).getType()).getDimSize(1);
      return op.getPositions() ? fmt::format("(seq * {} + tok)", tokens)
                               : std::string("seq");
    }
    default:
      return row.str();
    }
  }

  /// Writes the sequence (and position) of row `row` where token operands
  /// need them, then loads the inputs that hold one value a row or a token,
  /// once a row.
  void writeTokenIndex(StringRef row, int indent, llvm::raw_ostream &os) {
    if (op.hasTokenOperands() && !sequenceGiven) {
      std::string ns = cuda ? "modk_cuda" : "modk_cpu::detail";
      os << fmt::format(
          "{:{}}const int64_t seq = {}::segmentOf(seg, nseg, {});\n", "",
          indent, ns, row.str());
    }
    if (op.hasTokenOperands() && op.getPositions())
      os << fmt::format("{:{}}const int64_t tok = pos[{}];\n", "", indent,
                        row.str());
    for (unsigned j = 0, e = op.getInputs().size(); j < e; ++j) {
      switch (op.getInputAccessAt(j)) {
      case modk::Access::ids:
        os << fmt::format("{:{}}const int64_t id{} = in{}[{}];\n", "", indent,
                          j, j, rowOf(j, row));
        break;
      case modk::Access::token_value:
      case modk::Access::row_value:
        os << fmt::format("{:{}}const float x{} = static_cast<float>(in{}[{}]);\n",
                          "", indent, j, j, rowOf(j, row));
        break;
      case modk::Access::scalar:
        os << fmt::format("{:{}}const float x{} = static_cast<float>(in{}[0]);\n",
                          "", indent, j, j);
        break;
      default:
        break; // read an element at a time
      }
    }
  }

  /// Whether input `j` holds one value a row, a token or a kernel (a
  /// scalar), loaded once a row rather than an element at a time.
  bool loadedOnceARow(unsigned j) { return op.isLoadedOnceARow(j); }

  /// Writes the stores of the values `body` yields, element (row, col) of
  /// each output (at its token where it is a token operand), rounded to
  /// the output's element type (bf16: the target namespace's bf16).
  void writeStores(Block &body, StringRef row, StringRef col, int indent,
                   llvm::raw_ostream &os) {
    unsigned nIn = op.getInputs().size();
    int64_t width = op.getWidth();
    for (auto [k, v] : llvm::enumerate(body.getTerminator()->getOperands())) {
      if (!op.isStoredPerElement(k))
        continue; // once a row, or added into the column sums or totals
      std::string value = storedValue(op.getOutputs()[k], names.lookup(v), cuda);
      std::string stored =
          rowPointers ? fmt::format("rout{}[{}]", k, col.str())
                      : fmt::format("out{}[{} * {} + {}]", k,
                                    rowOf(nIn + k, row), rowStride(nIn + k),
                                    col.str());
      // A scatter-add adds at the row's id (the kernel orders equal ids).
      os << fmt::format(
          "{:{}}{} {}= {};\n", "", indent, stored,
          op.getOutputAccessAt(k) == modk::Access::scatter ? "+" : "", value);
    }
  }

  /// Writes the stores of the outputs that hold one value a row, at row
  /// `row` (or at its token: a token scalar); on CUDA by the one thread
  /// for which `firstThread` holds.
  void writeRowScalarStores(Block &body, StringRef row, StringRef firstThread,
                            int indent, llvm::raw_ostream &os) {
    unsigned nIn = op.getInputs().size();
    for (auto [k, v] : llvm::enumerate(body.getTerminator()->getOperands())) {
      if (!op.isStoredOnceARow(k))
        continue;
      os << fmt::format("{:{}}{}out{}[{}] = {};\n", "", indent,
                        cuda ? fmt::format("if ({})\n{:{}}", firstThread.str(),
                                           "", indent + 2)
                             : std::string(),
                        k, rowOf(nIn + k, row), names.lookup(v));
    }
  }

  /// Writes the additions of element (row, c)'s values into the column sums:
  /// `sum(n, c)` names the accumulator of the n-th column sum.
  void writeColumnSums(Block &body, function_ref<std::string(unsigned)> sum,
                       int indent, llvm::raw_ostream &os) {
    unsigned n = 0;
    for (auto [k, v] : llvm::enumerate(body.getTerminator()->getOperands()))
      if (op.getOutputAccessAt(k) == modk::Access::column_sum)
        os << fmt::format("{:{}}{} += {};\n", "", indent, sum(n++),
                          names.lookup(v));
  }

  /// Writes the additions of the row's values into the row totals, once a
  /// row: `total(n)` names the accumulator of the n-th total; on CUDA by
  /// the one thread for which `firstThread` holds.
  void writeRowTotals(Block &body, function_ref<std::string(unsigned)> total,
                      StringRef firstThread, int indent,
                      llvm::raw_ostream &os) {
    unsigned n = 0;
    for (auto [k, v] : llvm::enumerate(body.getTerminator()->getOperands()))
      if (op.getOutputAccessAt(k) == modk::Access::row_sum)
        os << fmt::format("{:{}}{}{} += {};\n", "", indent,
                          cuda ? fmt::format("if ({})\n{:{}}",
                                             firstThread.str(), "", indent + 2)
                               : std::string(),
                          total(n++), names.lookup(v));
  }

  /// Whether some output is written an element at a time or added into
  /// the column sums (not once a row).
  bool hasElementOutputs() {
    for (unsigned k = 0, e = op.getOutputs().size(); k < e; ++k)
      if (!op.isStoredOnceARow(k) &&
          op.getOutputAccessAt(k) != modk::Access::row_sum)
        return true;
    return false;
  }

private:
  modk::RowsOp op;
  std::optional<unsigned> accInput;
  bool inRegisters = false;
  bool rowPointers = false;
  bool sequenceGiven = false;
  std::optional<std::pair<std::string, std::string>> columnRange;
};

/// Writes the statements of row `i` of `op` at `inner` spaces: the row's
/// token and its once-a-row loads, its sums, then its elements (stores and
/// column sums). On CUDA the row is a warp's (`lane`), or with `perBlock`
/// a block's (columns in the threads' registers, col<n>[j] the column
/// sums); on the CPU part[] holds the chunk's column sums.
LogicalResult writeRow(modk::RowsOp op, RowStatements &stmts, bool cuda,
                       bool perBlock, int inner, llvm::raw_ostream &os) {
  Block &reduce = op.getReduce().front(), &body = op.getBody().front();
  int64_t width = op.getWidth();
  unsigned sums = op.getNumReductions(), maxima = op.getNumMaxima();
  auto all = [](Operation &) { return true; };
  stmts.writeTokenIndex("i", inner, os);
  if (perBlock)
    stmts.writeRegisterArrays(/*vectors=*/false, "i", inner, os);
  if (!cuda)
    stmts.writeRowPointers("i", inner, os);
  std::string pad(inner, ' ');
  bool columnSlots = stmts.usesColumnSlots();
  auto openColumns = [&](StringRef simd) {
    if (perBlock && columnSlots)
      os << fmt::format("#pragma unroll\n{0}for (int j = 0; j < CT; ++j) "
                        "{{\n{0}  const int c = threadIdx.x + j * T;\n"
                        "{0}  if (c >= {1})\n{0}    break;\n",
                        pad, width);
    else if (perBlock)
      os << fmt::format("{}for (int c = threadIdx.x; c < {}; c += T) {{\n",
                        pad, width);
    else if (cuda)
      os << fmt::format("{}for (int c = lane; c < {}; c += modk_cuda::kWarp) "
                        "{{\n",
                        pad, width);
    else if (const auto &range = stmts.visitedColumns())
      os << fmt::format("#pragma omp simd{}\n{}for (int64_t c = {}; c < {}; "
                        "++c) {{\n",
                        simd.str(), pad, range->first, range->second);
    else
      os << fmt::format("#pragma omp simd{}\n{}for (int64_t c = 0; c < {}; "
                        "++c) {{\n",
                        simd.str(), pad, width);
  };
  if (maxima > 0) {
    // The row's maxima first: `reduce` and `body` read them.
    Block &block = op.getMaxima().front();
    stmts.nameArguments(block);
    std::vector<std::string> maxNames;
    for (unsigned k = 0; k < maxima; ++k) {
      maxNames.push_back(fmt::format("max{}", k));
      os << fmt::format("{}float max{} = {};\n", pad, k,
                        cuda ? "modk_cuda::negInf()"
                             : "-std::numeric_limits<float>::infinity()");
    }
    openColumns(fmt::format(" reduction(max : {})", fmt::join(maxNames, ", ")));
    stmts.writeLoads(block, all, "i", "c", inner + 2, os);
    if (failed(stmts.writeOps(block, all, inner + 2, os)))
      return failure();
    for (auto [k, v] : llvm::enumerate(block.getTerminator()->getOperands()))
      os << fmt::format(cuda ? "{0}  max{1} = fmaxf(max{1}, {2});\n"
                             : "{0}  max{1} = max{1} > {2} ? max{1} : {2};\n",
                        pad, k, stmts[v]);
    os << pad << "}\n";
    for (unsigned k = 0; cuda && k < maxima; ++k)
      os << fmt::format("{}max{} = modk_cuda::{}(max{}{});\n", pad, k,
                        perBlock ? "blockMax" : "warpMax", k,
                        perBlock ? ", scratch" : "");
    stmts.nameArguments(reduce);
  }
  if (sums > 0) {
    std::vector<std::string> sumNames;
    for (unsigned k = 0; k < sums; ++k) {
      sumNames.push_back(fmt::format("sum{}", k));
      os << fmt::format("{}float sum{} = 0.0f;\n", pad, k);
    }
    openColumns(fmt::format(" reduction(+ : {})", fmt::join(sumNames, ", ")));
    stmts.writeLoads(reduce, all, "i", "c", inner + 2, os);
    if (failed(stmts.writeOps(reduce, all, inner + 2, os)))
      return failure();
    for (auto [k, v] : llvm::enumerate(reduce.getTerminator()->getOperands()))
      os << fmt::format("{}  sum{} += {};\n", pad, k, stmts[v]);
    os << pad << "}\n";
    for (unsigned k = 0; cuda && k < sums; ++k)
      os << fmt::format("{}sum{} = modk_cuda::{}(sum{}{});\n", pad, k,
                        perBlock ? "blockSum" : "warpSum", k,
                        perBlock ? ", scratch" : "");
  }
  stmts.nameArguments(body);
  stmts.findRowInvariants(body);
  auto once = [&](Operation &o) { return stmts.rowInvariant(o); };
  auto perElement = [&](Operation &o) {
    return !stmts.rowInvariant(o) || isa<arith::ConstantOp>(o);
  };
  if (failed(stmts.writeOps(body, once, inner, os)))
    return failure();
  stmts.writeRowScalarStores(
      body, "i", perBlock ? "threadIdx.x == 0" : "lane == 0", inner, os);
  // The totals follow the column sums: in part[] on the CPU, in tot<n> on
  // CUDA (a block's).
  int64_t columnSumFloats =
      width * llvm::count_if(op.getRowSumOutputs(), [&](unsigned k) {
        return op.getOutputAccessAt(k) == modk::Access::column_sum;
      });
  stmts.writeRowTotals(
      body,
      [&](unsigned n) {
        return perBlock ? fmt::format("tot{}", n)
                        : fmt::format("part[{}]", columnSumFloats + n);
      },
      "threadIdx.x == 0", inner, os);
  if (stmts.hasElementOutputs()) {
    int at = inner + 2;
    // On CUDA per block, each thread's column sums are in col<n>[j].
    openColumns("");
    stmts.writeLoads(body, perElement, "i", "c", at, os);
    if (failed(stmts.writeOps(body, perElement, at, os)))
      return failure();
    stmts.writeStores(body, "i", "c", at, os);
    stmts.writeColumnSums(
        body,
        [&](unsigned n) {
          return perBlock ? fmt::format("col{}[j]", n)
                          : fmt::format("part[{} + c]", n * width);
        },
        at, os);
    os << pad << "}\n";
  }
  return success();
}

/// Writes one pair of elements of a `head_dim` kernel (RoPE): columns c
/// and c + HD/2 of a head of row i. Each input's two elements are loaded
/// before either is computed, so the kernel may work in place; then `body`
/// runs once an element, modk.rotate_half reading the other one (negated
/// for the first half), and the values are stored. In a GEMM's `epilogue`
/// (CUDA's storePair) the product's two elements are acc0 and acc1. The
/// loops around name the pair's angle rope_cos and rope_sin.
LogicalResult writePairStatements(modk::RowsOp op, KernelStatements &stmts,
                                  bool cuda, bool epilogue, int indent,
                                  llvm::raw_ostream &os) {
  Block &body = op.getBody().front();
  const std::string columns[2] = {
      "c", fmt::format("c + {}", *op.getHeadDim() / 2)};
  // Rows are a buffer's row stride apart: its width, or a column window's
  // source row (modk-fuse-horizontal; written in place).
  auto stride = [](Value v) {
    return modk::ColumnWindowOp::rowStride(cast<MemRefType>(v.getType()));
  };
  std::string pad(indent, ' ');
  for (BlockArgument arg : body.getArguments()) {
    if (arg.use_empty())
      continue;
    unsigned j = arg.getArgNumber();
    std::string loads[2];
    for (int e = 0; e < 2; ++e)
      loads[e] = epilogue && isa<BlockArgument>(op.getInputs()[j])
                     ? fmt::format("acc{}", e)
                     : fmt::format("static_cast<float>(in{}[i * {} + {}])", j,
                                   stride(op.getInputs()[j]), columns[e]);
    os << fmt::format("{}const float x{}a = {}, x{}b = {};\n", pad, j,
                      loads[0], j, loads[1]);
  }
  auto all = [](Operation &) { return true; };
  std::vector<std::string> values[2];
  for (int e = 0; e < 2; ++e) {
    for (BlockArgument arg : body.getArguments()) {
      unsigned j = arg.getArgNumber();
      stmts.setName(arg, fmt::format("x{}{}", j, e ? 'b' : 'a'));
      stmts.setPartner(arg, e ? fmt::format("x{}a", j)
                              : fmt::format("(-x{}b)", j));
    }
    if (failed(stmts.writeOps(body, all, indent, os)))
      return failure();
    for (Value v : body.getTerminator()->getOperands())
      values[e].push_back(stmts[v]);
  }
  for (auto [k, out] : llvm::enumerate(op.getOutputs()))
    for (int e = 0; e < 2; ++e)
      os << fmt::format("{}out{}[i * {} + {}] = {};\n", pad, k, stride(out),
                        columns[e], storedValue(out, values[e][k], cuda));
  return success();
}

/// The opening of the CUDA kernel modc_rows_<index> that gives each row a
/// warp: row i, the thread's `lane`, and none past the row count.
std::string warpRowKernelHead(int64_t index, const std::string &params) {
  return fmt::format(
      "__global__ __launch_bounds__(modk_cuda::detail::kThreads) void "
      "modc_rows_{}(const int64_t *rows, {}) {{\n"
      "  const int64_t i = int64_t(blockIdx.x) * "
      "modk_cuda::detail::kRowWarps + threadIdx.x / modk_cuda::kWarp;\n"
      "  if (i >= *rows)\n    return;\n"
      "  const int lane = threadIdx.x % modk_cuda::kWarp;\n",
      index, params);
}

/// The theta of the body's modk.rope_angle, if it reads one.
std::optional<double> ropeTheta(modk::RowsOp op) {
  for (Operation &o : op.getBody().front())
    if (auto angle = dyn_cast<modk::RopeAngleOp>(o))
      return angle.getTheta().convertToDouble();
  return std::nullopt;
}
} // namespace

std::string PlanEmitter::rowKernelKey(modk::RowsOp op) {
  // Operand types, then each op of the regions with its attributes and its
  // operands as positions within the block: the same for the same math.
  std::string key;
  llvm::raw_string_ostream os(key);
  for (Type t : op->getOperandTypes()) {
    // A column window's offset is in its pointer, not in the kernel: the
    // windows of Q and K share one kernel.
    auto window = dyn_cast<MemRefType>(t);
    if (auto layout =
            window ? dyn_cast<StridedLayoutAttr>(window.getLayout()) : nullptr)
      t = MemRefType::get(window.getShape(), window.getElementType(),
                          StridedLayoutAttr::get(t.getContext(), 0,
                                                 layout.getStrides()));
    os << t << ";";
  }
  for (Attribute access : op.getInputAccess())
    os << stringifyAccess(cast<modk::AccessAttr>(access).getValue()) << ";";
  os << "->";
  for (Attribute access : op.getOutputAccess())
    os << stringifyAccess(cast<modk::AccessAttr>(access).getValue()) << ";";
  if (std::optional<uint64_t> hd = op.getHeadDim())
    os << "heads" << *hd << ";";
  for (Region *region : {&op.getMaxima(), &op.getReduce(), &op.getBody()}) {
    if (region->empty()) {
      os << "|none";
      continue;
    }
    Block &block = region->front();
    llvm::DenseMap<Value, unsigned> position;
    for (BlockArgument arg : block.getArguments())
      position[arg] = position.size();
    os << "|" << block.getNumArguments();
    for (Operation &o : block) {
      os << ";" << o.getName() << o.getAttrDictionary();
      for (Value v : o.getOperands())
        os << "," << position.lookup(v);
      for (Value r : o.getResults())
        position[r] = position.size();
    }
  }
  return key;
}

void PlanEmitter::collectRowKernels() {
  std::map<std::string, int> byKey, epilogueByKey, gatherByKey;
  // CUDA applies a GEMM's `rows` epilogue inside the GEMM's tiles (a
  // functor); the CPU runs it as a row kernel over the staged product.
  bool functors = targetIsCuda();
  for (modk::EntryOp e : entries)
    e.walk([&](modk::RowsOp op) {
      if (isa<modk::GemmOp>(op->getParentOp()) && epilogueNeedsNoKernel(op))
        return;
      bool epilogue = functors && isa<modk::GemmOp>(op->getParentOp());
      bool gather =
          isa<modk::RouteSelectOp, modk::DecodeSelectOp>(op->getParentOp());
      auto &keys = gather ? gatherByKey : epilogue ? epilogueByKey : byKey;
      auto &list = gather ? rowGathers : epilogue ? rowEpilogues : rowKernels;
      auto [it, added] = keys.try_emplace(rowKernelKey(op), int(list.size()));
      if (added)
        list.push_back(op);
      rowKernelOf[op] = it->second;
      // An epilogue over heads also runs as a kernel, in place on the
      // stored product, where the product's tile cannot hold it.
      if (epilogue && op.getHeadDim()) {
        auto [kernel, fresh] =
            byKey.try_emplace(rowKernelKey(op), int(rowKernels.size()));
        if (fresh)
          rowKernels.push_back(op);
        separateKernelOf[op] = kernel->second;
      }
    });
}

std::vector<std::string> PlanEmitter::rowKernelParamList(modk::RowsOp op,
                                                         bool segments) {
  std::vector<std::string> params;
  if (op.hasTokenOperands()) {
    if (segments)
      params.push_back("const int64_t *seg, int64_t nseg");
    if (op.getPositions())
      params.push_back("const int32_t *pos");
  }
  // RoPE's positions, and on CUDA its angle table (ropeTableFor).
  bool angles = op.getHeadDim() && op.getPositions();
  if (angles)
    params.push_back("const int32_t *pos");
  for (auto [j, in] : llvm::enumerate(op.getInputs()))
    params.push_back(fmt::format(
        "const {} *in{}",
        cType(cast<MemRefType>(in.getType()).getElementType()), j));
  for (auto [j, out] : llvm::enumerate(op.getOutputs()))
    params.push_back(fmt::format(
        "{} *out{}", cType(cast<MemRefType>(out.getType()).getElementType()),
        j));
  if (angles && targetIsCuda())
    params.push_back("const float2 *rope_table");
  return params;
}

std::string PlanEmitter::rowKernelParams(modk::RowsOp op) {
  return fmt::format("{}", fmt::join(rowKernelParamList(op, true), ", "));
}

Value PlanEmitter::rowBuffer(modk::RowsOp op) {
  for (unsigned i = 0, e = op.getInputs().size() + op.getOutputs().size();
       i < e; ++i) {
    modk::Access access = op.getAccess(i);
    if (access == modk::Access::row || access == modk::Access::row_value ||
        access == modk::Access::ids)
      return op.getInputOrOutput(i);
  }
  return op.getOutputs().front(); // the verifier requires one
}

std::vector<std::string> PlanEmitter::rowKernelArgs(modk::RowsOp op,
                                                    bool segments) {
  std::vector<std::string> args;
  if (op.hasTokenOperands()) {
    if (segments) {
      args.push_back(name(op.getSegments()));
      args.push_back("B");
    }
    if (Value pos = op.getPositions())
      args.push_back(name(pos));
  }
  bool angles = op.getHeadDim() && op.getPositions();
  if (angles)
    args.push_back(name(op.getPositions()));
  for (Value v : op.getInputs())
    args.push_back(name(v));
  for (Value v : op.getOutputs())
    args.push_back(name(v));
  if (angles && targetIsCuda())
    args.push_back(ropeTableArg(op));
  return args;
}

LogicalResult PlanEmitter::emitRowKernelDefinitions() {
  bool cuda = targetIsCuda();
  for (auto [index, op] : llvm::enumerate(rowKernels)) {
    if (op.getHeadDim()) {
      if (failed(emitHeadKernel(op, index)))
        return failure();
      continue;
    }
    if (op.getOutputAccessAt(0) == modk::Access::scatter) {
      if (failed(emitScatterKernel(op, index)))
        return failure();
      continue;
    }
    RowStatements stmts(op, cuda);
    stmts.nameArguments(op.getReduce().front());
    int64_t width = op.getWidth();
    unsigned sums = op.getNumReductions();
    os << fmt::format("/// modk.rows: {} input(s), {} output(s), {} sum(s) a "
                      "row of {}.\n",
                      op.getInputs().size(), op.getOutputs().size(), sums,
                      width);
    // Rows, then the sums of a row, then its elements. A kernel with column
    // sums runs its rows in chunks whose partial sums are added in chunk
    // order (deterministic): on the CPU the prelude's chunkedReduce, on
    // CUDA a block per kRB rows, threads over columns, then reduceColumns.
    // The row totals follow the column sums, a float each.
    std::vector<Value> columnSums, totals;
    for (unsigned k : op.getRowSumOutputs())
      (op.getOutputAccessAt(k) == modk::Access::row_sum ? totals : columnSums)
          .push_back(op.getOutputs()[k]);
    unsigned nCols = columnSums.size(), nTotals = totals.size();
    int64_t sumFloats = nCols * width + nTotals;
    auto outputIndex = [&](Value out) {
      return llvm::find(op.getOutputs(), out) - op.getOutputs().begin();
    };
    bool perBlock = cuda && sumFloats > 0;
    // The statements' indent: inside the row loop on the CPU, the kernel's
    // body on CUDA (a warp, or a block's row loop, is the row).
    int inner;
    if (perBlock) {
      // Each thread's columns c = threadIdx.x + j T in registers: the
      // vectors for every row, a row's elements for its sums and its body;
      // rows wider than kMaxRegisterWidth (a vocabulary) are read again
      // from memory (L2) in each pass instead of spilling.
      if (width <= kMaxRegisterWidth)
        stmts.keepInRegisters();
      // Whether a row sums or maximises over its columns, and whether it
      // is visited column by column at all (not only values a row, as the
      // causal-router loss's).
      bool reduces = sums + op.getNumMaxima() > 0;
      bool columnLoops = reduces || stmts.hasElementOutputs();
      os << fmt::format(
          "__global__ __launch_bounds__(modk_cuda::train_detail::colThreads<"
          "{1}>()) void modc_rows_{0}(const int64_t *rows, {2}, float "
          "*partial) {{\n"
          "{5}{3}{4}"
          "  const int64_t n = *rows;\n"
          "  const int64_t i0 = int64_t(blockIdx.x) * "
          "modk_cuda::train_detail::kRB;\n"
          "  if (i0 >= n)\n    return;\n"
          "  const int64_t i1 = modk_cuda::detail::minI64(n, i0 + "
          "modk_cuda::train_detail::kRB);\n",
          index, width, rowKernelParams(op),
          // Column slots (register arrays) where a thread keeps its columns
          // and loops over them (writeRow); shared scratch where a row sums
          // or maximises.
          columnLoops && stmts.usesColumnSlots()
              ? fmt::format("  constexpr int CT = ({} + T - 1) / T; // "
                            "columns a thread\n",
                            width)
              : std::string(),
          reduces ? "  __shared__ float scratch[32];\n" : "",
          columnLoops ? fmt::format("  constexpr int T = "
                                    "modk_cuda::train_detail::colThreads<{}>()"
                                    ";\n",
                                    width)
                      : std::string());
      for (unsigned k = 0; k < nCols; ++k)
        os << fmt::format("  float col{}[CT] = {{}};\n", k);
      for (unsigned t = 0; t < nTotals; ++t)
        os << fmt::format("  float tot{} = 0.0f; // thread 0's\n", t);
      stmts.setRowCount("n");
      stmts.writeRegisterArrays(/*vectors=*/true, "", 2, os);
      os << "  for (int64_t i = i0; i < i1; ++i) {\n";
      inner = 4;
    } else if (cuda) {
      os << warpRowKernelHead(index, rowKernelParams(op));
      stmts.setRowCount("*rows");
      inner = 2;
    } else if (sumFloats > 0) {
      os << fmt::format("void modc_rows_{}(int64_t rows, {}) {{\n", index,
                        rowKernelParams(op));
      // One column sum accumulates in place; several sums in one buffer
      // first.
      if (nCols == 1 && nTotals == 0)
        os << fmt::format("  float *sums = out{};\n",
                          outputIndex(columnSums[0]));
      else
        os << fmt::format("  std::vector<float> sumBuffer({}, 0.0f);\n"
                          "  float *sums = sumBuffer.data();\n",
                          sumFloats);
      os << fmt::format("  modk_cpu::detail::chunkedReduce<float>(\n"
                        "      rows, {0}, sums, rows * {1} > "
                        "modk_cpu::detail::kMinParallelWork,\n"
                        "      [&](int64_t i0, int64_t i1, float *part) {{\n"
                        "    for (int64_t i = i0; i < i1; ++i) {{\n",
                        sumFloats, width);
      stmts.setRowCount("rows");
      inner = 6;
    } else {
      os << fmt::format(
          "void modc_rows_{}(int64_t rows, {}) {{\n"
          "#pragma omp parallel for if (rows * {} > "
          "modk_cpu::detail::kMinParallelWork)\n"
          "  for (int64_t i = 0; i < rows; ++i) {{\n",
          index, rowKernelParams(op), width);
      stmts.setRowCount("rows");
      inner = 4;
    }
    if (failed(writeRow(op, stmts, cuda, perBlock, inner, os)))
      return failure();
    if (perBlock) {
      os << "  }\n";
      // A block's partial row: its column sums, then its totals.
      if (nCols > 0)
        os << "#pragma unroll\n  for (int j = 0; j < CT; ++j) {\n"
              "    const int c = threadIdx.x + j * T;\n";
      for (unsigned k = 0; k < nCols; ++k)
        os << fmt::format(
            "    if (c < {0})\n      partial[int64_t(blockIdx.x) * {1} + "
            "{2} + c] = col{3}[j];\n",
            width, sumFloats, k * width, k);
      if (nCols > 0)
        os << "  }\n";
      for (unsigned t = 0; t < nTotals; ++t)
        os << fmt::format("  if (threadIdx.x == 0)\n    partial[int64_t("
                          "blockIdx.x) * {} + {}] = tot{};\n",
                          sumFloats, nCols * width + t, t);
    } else if (!cuda && sumFloats > 0) {
      os << "    }\n  });\n";
      if (nCols > 1 || nTotals > 0)
        for (auto [k, out] : llvm::enumerate(columnSums))
          os << fmt::format(
              "  for (int64_t c = 0; c < {0}; ++c)\n"
              "    out{1}[c] += sums[{2} + c];\n",
              width, outputIndex(out), k * width);
      for (auto [t, out] : llvm::enumerate(totals))
        os << fmt::format("  out{}[0] += sums[{}];\n", outputIndex(out),
                          nCols * width + t);
    } else if (!cuda) {
      os << "  }\n";
    }
    os << "}\n\n";
  }
  if (failed(emitGatherDefinitions()))
    return failure();
  return emitOptimizerKernel();
}

LogicalResult PlanEmitter::emitGroupedRowKernel(modk::RowsOp op, int index) {
  if (!targetIsCuda() || op.getHeadDim() || op.hasRowSums() ||
      op.getOutputAccessAt(0) == modk::Access::scatter)
    return op.emitOpError("has no grouped kernel: only a warp-per-row kernel "
                          "(no sums over rows, no scatter, not over heads) "
                          "runs grouped");
  // The table's member: the row count, then modc_rows_<index>'s parameters
  // in their order, each a field of the same name.
  std::vector<std::string> fields{"const int64_t *rows"};
  for (const std::string &params : rowKernelParamList(op, true))
    for (StringRef param : llvm::split(params, ", "))
      fields.push_back(param.str());
  os << fmt::format(
      "/// modc_rows_{0} on the members of a group (modk-group-gemms): the "
      "grid's y\n/// is the member, whose buffers and row count the table "
      "holds; each member's\n/// rows run modc_rows_{0}'s code.\n"
      "struct modc_rows_{0}_member {{\n",
      index);
  for (const std::string &field : fields)
    os << "  " << field << ";\n";
  os << fmt::format(
      "}};\n"
      "template <int M> struct modc_rows_{0}_group {{\n"
      "  static_assert(M >= 2 && M <= modk_cuda::detail::kMaxRowGroup, "
      "\"2 to kMaxRowGroup members\");\n"
      "  modc_rows_{0}_member m[M];\n"
      "}};\n"
      "template <int M>\n"
      "__global__ __launch_bounds__(modk_cuda::detail::kThreads) void "
      "modc_rows_{0}_grouped(const __grid_constant__ modc_rows_{0}_group<M> "
      "group) {{\n"
      "  const modc_rows_{0}_member &member = group.m[blockIdx.y];\n",
      index);
  for (const std::string &field : fields) {
    StringRef decl(field);
    os << fmt::format("  {} = member.{};\n", field,
                      decl.substr(decl.find_last_of(" *") + 1).str());
  }
  os << "  const int64_t i = int64_t(blockIdx.x) * "
        "modk_cuda::detail::kRowWarps + threadIdx.x / modk_cuda::kWarp;\n"
        "  if (i >= *rows)\n    return;\n"
        "  const int lane = threadIdx.x % modk_cuda::kWarp;\n";
  RowStatements stmts(op, /*cuda=*/true);
  stmts.nameArguments(op.getReduce().front());
  stmts.setRowCount("*rows");
  if (failed(writeRow(op, stmts, /*cuda=*/true, /*perBlock=*/false, 2, os)))
    return failure();
  os << "}\n\n";
  return success();
}

LogicalResult PlanEmitter::emitScatterKernel(modk::RowsOp op, int index) {
  // Rows with equal ids add into one table row. Each thread owns a part of
  // the table and visits every row in row order, so no atomics are needed
  // and the sums' order does not depend on the thread count: on the CPU a
  // block of 16 columns a thread, on CUDA the table rows whose id is the
  // block's index modulo the grid, a column a thread.
  bool cuda = targetIsCuda();
  int64_t width = op.getWidth();
  unsigned ids = *op.getIdsInput();
  RowStatements stmts(op, cuda);
  os << fmt::format("/// modk.rows: {} input(s), a scatter-add into the rows "
                    "of a table at the rows' ids, {} wide.\n",
                    op.getInputs().size(), width);
  int inner;
  if (cuda) {
    os << fmt::format(
        "__global__ __launch_bounds__(modk_cuda::train_detail::colThreads<"
        "{1}>()) void modc_rows_{0}(const int64_t *rows, {2}) {{\n"
        "  constexpr int T = modk_cuda::train_detail::colThreads<{1}>();\n"
        "  const int64_t n = *rows;\n"
        "  for (int64_t i = 0; i < n; ++i) {{\n"
        "    if (uint32_t(in{3}[i]) % gridDim.x != blockIdx.x)\n"
        "      continue; // another block's table row\n",
        index, width, rowKernelParams(op), ids);
    stmts.setRowCount("n");
    inner = 4;
  } else {
    os << fmt::format(
        "void modc_rows_{0}(int64_t rows, {1}) {{\n"
        "#pragma omp parallel for schedule(static) if (rows * {2} > "
        "modk_cpu::detail::kMinParallelWork)\n"
        "  for (int64_t c0 = 0; c0 < {2}; c0 += 16) {{\n"
        "    const int64_t c1 = c0 + 16 < {2} ? c0 + 16 : {2};\n"
        "    for (int64_t i = 0; i < rows; ++i) {{\n",
        index, rowKernelParams(op), width);
    stmts.setRowCount("rows");
    stmts.visitColumns("c0", "c1");
    inner = 6;
  }
  stmts.nameArguments(op.getReduce().front());
  if (failed(writeRow(op, stmts, cuda, /*perBlock=*/cuda, inner, os)))
    return failure();
  os << (cuda ? "  }\n}\n\n" : "    }\n  }\n}\n\n");
  return success();
}

std::string PlanEmitter::ropeTableArg(modk::RowsOp op) {
  std::optional<double> theta = ropeTheta(op);
  if (!theta)
    return "nullptr";
  // The table covers a sequence's positions; the package builds it when
  // it initialises, so that a captured decode step finds it.
  return fmt::format("modk_cuda::detail::ropeTableFor<{}>({}, {}, s)",
                     *op.getHeadDim(), floatLiteral(*theta), seqLen);
}

LogicalResult PlanEmitter::emitHeadKernel(modk::RowsOp op, int index) {
  bool cuda = targetIsCuda();
  KernelStatements stmts(cuda);
  int64_t width = op.getWidth(), hd = *op.getHeadDim(), half = hd / 2;
  std::optional<double> theta = ropeTheta(op);
  unsigned nIn = op.getInputs().size();
  os << fmt::format("/// modk.rows over heads of {} columns (RoPE): {} "
                    "input(s), {} output(s), rows of {}.\n",
                    hd, nIn, op.getOutputs().size(), width);
  if (cuda) {
    // A warp per row, lanes over the pairs of its heads; the angle from the
    // table where the package has one for the position, else formed here.
    os << warpRowKernelHead(index, rowKernelParams(op))
       << fmt::format("  for (int e = lane; e < {}; e += modk_cuda::kWarp) "
                      "{{\n"
                      "    const int j = e % {};\n"
                      "    const int64_t c = int64_t(e / {}) * {} + j;\n",
                      width / 2, half, half, hd);
    if (theta)
      os << fmt::format(
          "    const int32_t p = pos[i];\n"
          "    const float2 cs = rope_table && p >= 0 && p < {0}\n"
          "        ? rope_table[int64_t(p) * {1} + j]\n"
          "        : modk_cuda::detail::ropeAngle<{2}>(p, j, {3});\n"
          "    const float rope_cos = cs.x, rope_sin = cs.y;\n",
          seqLen, half, hd, floatLiteral(*theta));
    if (failed(writePairStatements(op, stmts, cuda, /*epilogue=*/false, 4,
                                   os)))
      return failure();
    os << "  }\n}\n\n";
    return success();
  }
  // Rows in parallel, each head's pairs in a SIMD loop; the angles from a
  // table of a sequence's positions, made on the first call.
  os << fmt::format("void modc_rows_{}(int64_t rows, {}) {{\n", index,
                    rowKernelParams(op));
  if (theta)
    os << fmt::format("  static const std::vector<float> rope_table =\n"
                      "      modk_cpu::detail::ropeTable<{}>({}, {});\n",
                      hd, floatLiteral(*theta), seqLen);
  os << fmt::format("#pragma omp parallel for if (rows * {} > "
                    "modk_cpu::detail::kMinParallelWork)\n"
                    "  for (int64_t i = 0; i < rows; ++i) {{\n",
                    width);
  if (theta)
    os << fmt::format("    float rope_row[{0}];\n"
                      "    const float *rope_c = "
                      "modk_cpu::detail::ropeTableRow<{0}>(rope_table, pos[i], "
                      "{1}, rope_row);\n"
                      "    const float *rope_s = rope_c + {2};\n",
                      hd, floatLiteral(*theta), half);
  os << fmt::format("    for (int64_t h = 0; h < {}; h += {}) {{\n"
                    "#pragma omp simd\n"
                    "      for (int64_t j = 0; j < {}; ++j) {{\n"
                    "        const int64_t c = h + j;\n",
                    width, hd, half);
  if (theta)
    os << "        const float rope_cos = rope_c[j], rope_sin = rope_s[j];\n";
  if (failed(writePairStatements(op, stmts, cuda, /*epilogue=*/false, 8,
                                 os)))
    return failure();
  os << "      }\n    }\n  }\n}\n\n";
  return success();
}

LogicalResult PlanEmitter::emitGatherDefinitions() {
  bool cuda = targetIsCuda();
  for (auto [index, op] : llvm::enumerate(rowGathers)) {
    RowStatements stmts(op, cuda);
    stmts.giveSequence();
    stmts.nameArguments(op.getReduce().front());
    os << fmt::format(
        "/// modk.rows gathered a sequence at a time by the kernel that "
        "selects the\n/// rows (modk-fuse-select-gather): {} input(s), {} "
        "output(s), {} sum(s) a row of {}.\nstruct modc_gather_{} {{\n",
        op.getInputs().size(), op.getOutputs().size(), op.getNumReductions(),
        op.getWidth(), index);
    for (const std::string &member : rowKernelParamList(op, false))
      os << "  " << member << ";\n";
    // The CPU prelude sizes its parallel regions by the row's width.
    if (!cuda)
      os << fmt::format("  static constexpr int64_t width = {};\n",
                        op.getWidth());
    int inner;
    if (cuda) {
      // Every lane of a warp, for row i of sequence seq.
      os << "  __device__ __forceinline__ void operator()(int64_t i, int64_t "
            "seq, int lane) const {\n";
      inner = 4;
    } else {
      os << "  void operator()(int64_t seq, int64_t i0, int64_t i1) const {\n"
            "    for (int64_t i = i0; i < i1; ++i) {\n";
      inner = 6;
    }
    if (failed(writeRow(op, stmts, cuda, /*perBlock=*/false, inner, os)))
      return failure();
    os << (cuda ? "  }\n};\n\n" : "    }\n  }\n};\n\n");
  }
  return success();
}

std::string PlanEmitter::gatherFunctor(modk::RowsOp op) {
  // The kernel's arguments without the segments: the functor is told the
  // sequence.
  std::vector<std::string> args = rowKernelArgs(op, /*segments=*/false);
  return fmt::format("{}modc_gather_{}{{{}}}",
                     targetIsCuda() ? "modc_rows::" : "",
                     rowKernelOf.lookup(op), fmt::join(args, ", "));
}

LogicalResult PlanEmitter::emitOptimizerKernel() {
  if (!optimizer)
    return success();
  bool cuda = targetIsCuda();
  Block &body = optimizer.getBody().front();
  auto argNames = modk::OptimizerOp::getArgumentNames();
  constexpr unsigned kElements = modk::OptimizerOp::kElements;
  // Pointers p, g, m, v; their elements pi, gi, mi, vi; the scalars by
  // their names. The body yields the new p, m and v. On CUDA one launch
  // updates every parameter: a block a chunk, each chunk's parameter read
  // from the step's table (modk_cuda::AdamTensor), `decay` chosen by the
  // parameter's flag.
  KernelStatements stmts(cuda);
  std::vector<std::string> params;
  std::string scalarLoads;
  int scalarCount = 0;
  if (cuda)
    params = {"const modk_cuda::AdamTensor *tensors", "int count",
              "int64_t chunks"};
  else
    params = {"int64_t n"};
  for (auto [k, arg] : llvm::enumerate(body.getArguments())) {
    std::string argName = argNames[k].str();
    if (k < kElements) {
      stmts.setName(arg, argName + "i");
      if (!cuda)
        params.push_back(fmt::format("{}float *{}",
                                     argName == "g" ? "const " : "", argName));
      continue;
    }
    stmts.setName(arg, argName);
    if (cuda && argName == "grad_scale")
      params.push_back("const modk_cuda::AdamCtl *ctl");
    else if (cuda)
      // The step's scalars are read from device memory, in argument order
      // (`decay` as `decayed`), so that a captured training step replays
      // with each step's learning rate and bias corrections (docs/cuda.md).
      scalarLoads += fmt::format(
          "  const float {} = scalars[{}];\n",
          argName == "decay" ? std::string("decayed") : argName, scalarCount++);
    else
      params.push_back("float " + argName);
  }
  if (cuda)
    params.push_back("const float *scalars");
  // On CUDA, `decay` is a parameter's: what reads it is computed per chunk.
  stmts.findInvariants(body, [&](BlockArgument arg) {
    return arg.getArgNumber() >= kElements &&
           !(cuda && argNames[arg.getArgNumber()] == "decay");
  });
  auto once = [&](Operation &o) { return stmts.rowInvariant(o); };
  auto perElement = [&](Operation &o) {
    return !stmts.rowInvariant(o) || isa<arith::ConstantOp>(o);
  };
  if (cuda) {
    os << fmt::format(
        "/// modk.optimizer @{}: one step's update of every parameter.\n"
        "__global__ __launch_bounds__(modk_cuda::detail::kThreads) void "
        "modc_optimizer_update({}) {{\n"
        "  if (!ctl->finite)\n"
        "    return; // a non-finite gradient must not reach the weights\n"
        "  const float grad_scale = ctl->scale;\n{}",
        optimizer.getSymName(), fmt::join(params, ", "), scalarLoads);
  } else {
    os << fmt::format("/// modk.optimizer @{}: one step's update of the n "
                      "elements of a parameter.\n"
                      "void modc_optimizer_update({}) {{\n",
                      optimizer.getSymName(), fmt::join(params, ", "));
  }
  if (failed(stmts.writeOps(body, once, 2, os)))
    return failure();
  if (cuda)
    os << "  for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += "
          "gridDim.x) {\n"
          "    const modk_cuda::AdamTensor &t = "
          "modk_cuda::adamTensorOf(tensors, count, chunk);\n"
          "    float *p = t.p, *m = t.m, *v = t.v;\n"
          "    const float *g = t.g;\n"
          "    const float decay = t.decays ? decayed : 1.0f;\n"
          "    const int64_t i0 = (chunk - t.firstChunk) * "
          "modk_cuda::train_detail::kNormChunk;\n"
          "    const int64_t i1 = modk_cuda::detail::minI64(t.n, i0 + "
          "modk_cuda::train_detail::kNormChunk);\n"
          "  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {\n";
  else
    os << "#pragma omp parallel for simd if (n > "
          "modk_cpu::detail::kMinParallelWork)\n"
          "  for (int64_t i = 0; i < n; ++i) {\n";
  // Every element is read before any is written (p, m, v in place).
  for (BlockArgument arg : body.getArguments().take_front(kElements))
    if (!arg.use_empty())
      os << fmt::format("    const float {0}i = {0}[i];\n",
                        argNames[arg.getArgNumber()].str());
  if (failed(stmts.writeOps(body, perElement, 4, os)))
    return failure();
  static constexpr const char *kYielded[] = {"p", "m", "v"};
  for (auto [k, v] : llvm::enumerate(body.getTerminator()->getOperands()))
    os << fmt::format("    {}[i] = {};\n", kYielded[k], stmts[v]);
  // The parameter's bf16 copy (bf16_copies), written with the master.
  if (cuda)
    os << fmt::format("    if (t.copy)\n      t.copy[i] = "
                      "modk_cuda::bf16({});\n  }}\n",
                      stmts[body.getTerminator()->getOperand(0)]);
  os << "  }\n}\n\n";
  return emitOptimizerNorm();
}

LogicalResult PlanEmitter::emitOptimizerNorm() {
  // The sum of the `norm` region's f64 terms over g[0, n), in chunks of a
  // size that depends only on n, added in chunk order: the same sum for
  // any thread count. On CUDA one launch covers every parameter, a block a
  // chunk writing its partial sum, and the prelude's adamFinish adds the
  // partials in order.
  bool cuda = targetIsCuda();
  Block &norm = optimizer.getNorm().front();
  KernelStatements stmts(cuda);
  stmts.setName(norm.getArgument(0), "gi");
  if (cuda)
    os << "/// The squared gradient norm's terms of every parameter, summed "
          "in f64 a chunk a\n/// block (modk.optimizer's `norm`).\n"
          "__global__ __launch_bounds__(modk_cuda::detail::kThreads) void "
          "modc_optimizer_norm(const modk_cuda::AdamTensor *tensors, int "
          "count, double *partial) {\n"
          "  __shared__ double scratch[32];\n"
          "  const int64_t chunk = blockIdx.x;\n"
          "  const modk_cuda::AdamTensor &t = "
          "modk_cuda::adamTensorOf(tensors, count, chunk);\n"
          "  const float *g = t.g;\n"
          "  const int64_t i0 = (chunk - t.firstChunk) * "
          "modk_cuda::train_detail::kNormChunk;\n"
          "  const int64_t i1 = modk_cuda::detail::minI64(t.n, i0 + "
          "modk_cuda::train_detail::kNormChunk);\n"
          "  double acc = 0.0;\n"
          "  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {\n";
  else
    os << "/// The squared gradient norm's terms of one tensor, summed in f64 "
          "(modk.optimizer's\n/// `norm`).\n"
          "double modc_optimizer_norm(const float *g, int64_t n) {\n"
          "  double total = 0.0;\n"
          "  modk_cpu::detail::chunkedReduce<double>(\n"
          "      n, 1, &total, n > modk_cpu::detail::kMinParallelWork,\n"
          "      [&](int64_t i0, int64_t i1, double *part) {\n"
          "    double acc = 0.0;\n"
          "#pragma omp simd reduction(+ : acc)\n"
          "    for (int64_t i = i0; i < i1; ++i) {\n";
  os << "    const float gi = g[i];\n";
  if (failed(stmts.writeOps(norm, [](Operation &) { return true; }, 4, os)))
    return failure();
  os << fmt::format("    acc += {};\n  }}\n",
                    stmts[norm.getTerminator()->getOperand(0)]);
  if (cuda)
    os << "  const double total = modk_cuda::blockSum(acc, scratch);\n"
          "  if (threadIdx.x == 0)\n    partial[chunk] = total;\n}\n\n";
  else
    os << "    part[0] += acc;\n  });\n  return total;\n}\n\n";
  return success();
}

static LogicalResult writeEpilogueOperands(modk::RowsOp op,
                                           llvm::raw_ostream &os);
static LogicalResult writeEpilogueElement(RowStatements &stmts, Block &body,
                                          llvm::raw_ostream &os);

LogicalResult PlanEmitter::emitRowEpilogueDefinitions() {
  if (rowEpilogues.empty())
    return success();
  os << "namespace modk_cuda {\nnamespace detail {\n";
  for (auto [index, op] : llvm::enumerate(rowEpilogues)) {
    unsigned nIn = op.getInputs().size(), nOut = op.getOutputs().size();
    RowStatements stmts(op, /*cuda=*/true, /*epilogue=*/true);
    Block &body = op.getBody().front();
    stmts.nameArguments(body);
    int64_t width = op.getWidth();
    std::optional<uint64_t> headDim = op.getHeadDim();
    os << fmt::format(
        "/// modk.rows as a GEMM's epilogue: element (i, c) of the product "
        "is acc;\n/// {} input(s), {} output(s), rows of {}.\n"
        "template <> struct RowsEpilogue<{}> {{\n"
        "  static constexpr int kHeadDim = {};\n"
        "  static_assert({} <= kEpiOperands, \"EpiArgs holds the buffers\");\n",
        nIn, nOut, width, index, headDim.value_or(0), nIn + nOut);
    if (headDim)
      os << "  /// Columns c and c + kHeadDim / 2 of a head (c in its first "
            "half): acc0, acc1.\n"
            "  static __device__ __forceinline__ void storePair(float acc0, "
            "float acc1,\n"
            "      const EpiArgs epi, int64_t i, int64_t c) {\n";
    else
      os << "  static __device__ __forceinline__ void store(float acc, const "
            "EpiArgs epi,\n"
            "                                               int64_t i, "
            "int64_t c) {\n";
    if (failed(writeEpilogueOperands(op, os)))
      return failure();
    if (headDim) {
      // The angle from the package's table (ropeTableFor): the double
      // precision sin and cos would take the tile's registers.
      if (std::optional<double> theta = ropeTheta(op))
        os << fmt::format("    const float2 cs = ropeAngleAt<{0}>(epi, "
                          "epi.pos[i], int(c % {0}));\n"
                          "    const float rope_cos = cs.x, rope_sin = "
                          "cs.y;\n",
                          *headDim);
      KernelStatements pair(/*cuda=*/true);
      if (failed(writePairStatements(op, pair, /*cuda=*/true,
                                     /*epilogue=*/true, 4, os)))
        return failure();
      os << "  }\n};\n\n";
      continue;
    }
    if (failed(writeEpilogueElement(stmts, body, os)))
      return failure();
    os << "  }\n};\n\n";
  }
  os << "} // namespace detail\n} // namespace modk_cuda\n";
  return success();
}

/// Declares, in a GEMM epilogue's store of element (i, c), the buffers of
/// `op` from `epi` (EpiArgs, or a CUTLASS kernel's StoreArgs: the same
/// names): its segments and positions where it reads or writes at tokens,
/// in<j> and out<k> from epi.operands, as modk_cuda's element types.
/// Fails where `op` names more buffers than epi's slots.
static LogicalResult writeEpilogueOperands(modk::RowsOp op,
                                           llvm::raw_ostream &os) {
  unsigned nIn = op.getInputs().size(), nOut = op.getOutputs().size();
  if (nIn + nOut > PlanEmitter::kEpilogueOperands)
    return op.emitOpError() << "as a GEMM epilogue takes at most "
                            << PlanEmitter::kEpilogueOperands << " buffers",
           failure();
  if (op.hasTokenOperands()) {
    os << "    const int64_t *seg = epi.seg;\n"
          "    const int64_t nseg = epi.nseg;\n";
    if (op.getPositions())
      os << "    const int32_t *pos = epi.pos;\n";
  }
  for (unsigned j = 0; j < nIn + nOut; ++j) {
    Value v = op.getInputOrOutput(j);
    if (isa<BlockArgument>(v))
      continue;
    std::string type = cElementType(
        cast<MemRefType>(v.getType()).getElementType(), "modk_cuda");
    bool output = j >= nIn;
    os << fmt::format(
        "    {0}{1} *{2}{3} = static_cast<{0}{1} *>(epi.operands[{4}]);\n",
        output ? "" : "const ", type, output ? "out" : "in",
        output ? j - nIn : j, j);
  }
  return success();
}

/// The statements of element (i, c) of a GEMM epilogue without head pairs:
/// its token's index, its loads, its math and its stores.
static LogicalResult writeEpilogueElement(RowStatements &stmts, Block &body,
                                          llvm::raw_ostream &os) {
  stmts.writeTokenIndex("i", 4, os);
  auto all = [](Operation &) { return true; };
  stmts.writeLoads(body, all, "i", "c", 4, os);
  if (failed(stmts.writeOps(body, all, 4, os)))
    return failure();
  stmts.writeStores(body, "i", "c", 4, os);
  return success();
}

FailureOr<std::string> modc::rowsEpilogueStore(Operation *product,
                                               StringRef name) {
  auto gemm = dyn_cast<modk::GemmOp>(product);
  modk::RowsOp op = gemm ? gemm.getEpilogueRows() : modk::RowsOp();
  if (!op || op.getHeadDim())
    return product->emitOpError("has no epilogue a GEMM library can store "
                                "by rows (a `rows` epilogue without head "
                                "pairs)"),
           failure();
  RowStatements stmts(op, /*cuda=*/true, /*epilogue=*/true);
  Block &body = op.getBody().front();
  stmts.nameArguments(body);
  std::string text;
  llvm::raw_string_ostream os(text);
  os << fmt::format(
      "/// The product's epilogue (its modk.rows) at element (i, c), acc "
      "the product's:\n/// its loads, math and stores, as the tiles' "
      "epilogue functor has them.\nstruct {} {{\n"
      "  using Args = StoreArgs;\n"
      "  static __device__ __forceinline__ void apply(float acc, const "
      "StoreArgs &epi,\n"
      "                                               int64_t i, int64_t c) "
      "{{\n",
      name.str());
  if (failed(writeEpilogueOperands(op, os)) ||
      failed(writeEpilogueElement(stmts, body, os)))
    return failure();
  os << "  }\n};\n";
  return text;
}

FailureOr<std::string> modc::elementwiseEpilogueMath(Operation *product,
                                                     StringRef name) {
  auto gemm = dyn_cast<modk::GemmOp>(product);
  Value source;
  if (!gemm || !gemm.isElementwiseEpilogue(&source))
    return product->emitOpError("has no elementwise epilogue for a GEMM "
                                "library"),
           failure();
  modk::RowsOp op = gemm.getEpilogueRows();
  RowStatements stmts(op, /*cuda=*/true, /*epilogue=*/true);
  Block &body = op.getBody().front();
  stmts.nameArguments(body);
  std::string params = "float acc";
  for (auto [j, in] : llvm::enumerate(op.getInputs()))
    if (source && in == source)
      params += fmt::format(", float x{}", j);
  std::string text;
  llvm::raw_string_ostream os(text);
  os << fmt::format("/// The product's epilogue (its modk.rows), element by "
                    "element: y from the\n/// product's element acc{}.\n"
                    "struct {} {{\n"
                    "  static __device__ __forceinline__ float apply({}) {{\n",
                    source ? " and the source's" : "", name.str(), params);
  if (failed(stmts.writeOps(body, [](Operation &) { return true; }, 4, os)))
    return failure();
  os << fmt::format("    return {};\n  }}\n}};\n",
                    stmts[body.getTerminator()->getOperand(0)]);
  return text;
}

std::string PlanEmitter::rowEpilogueArgs(modk::GemmOp gemm) {
  modk::RowsOp op = gemm.getEpilogueRows();
  std::string text = "modk_cuda::detail::EpiArgs epi;\n";
  if (op.hasTokenOperands()) {
    text += fmt::format("epi.seg = {};\nepi.nseg = B;\n",
                        name(op.getSegments()));
    if (Value pos = op.getPositions())
      text += fmt::format("epi.pos = {};\n", name(pos));
  }
  if (op.getHeadDim() && op.getPositions())
    text += fmt::format("epi.pos = {};\nepi.ropeTable = {};\n"
                        "epi.ropePositions = {};\n",
                        name(op.getPositions()), ropeTableArg(op), seqLen);
  for (unsigned j = 0, e = op.getInputs().size() + op.getOutputs().size();
       j < e; ++j) {
    Value v = op.getInputOrOutput(j);
    if (!isa<BlockArgument>(v))
      text += fmt::format("epi.operands[{}] = (void *)({});\n", j, name(v));
  }
  return text;
}
