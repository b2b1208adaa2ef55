//===- Passes.td - Transforms of the modk dialect -*- tablegen -*-===//

#ifndef MODC_DIALECT_MODK_TRANSFORMS_PASSES
#define MODC_DIALECT_MODK_TRANSFORMS_PASSES

include "mlir/Pass/PassBase.td"

def StoreBf16Activations : Pass<"modk-store-bf16", "::modc::modk::EntryOp"> {
  let summary = "Store the product operands of a bf16 model as bf16";
  let description = [{
    In a bf16 model every product rounds its operands to bf16, so a buffer
    that only products read holds bf16 values in f32 arrays. In all
    entries of a bf16 model, such a buffer becomes `memref<...xbf16>` (half
    the bytes, the same values) when every use reads it as a product operand
    (a `modk.gemm` input, the output gradient of a `modk.gemm_dgrad`, either
    operand of a `modk.gemm_wgrad`, and attention's output as
    `modk.attention_grad` reads it: a bf16 model's D = rowsum(dout * o)
    rounds o, as the O projection does) and every write can round as it
    stores: `modk.rmsnorm`, a `modk.rows`' output at its rows (the routed
    rows' normalised copy), a `modk.gemm` with epilogue `none`, `gelu` or
    `swiglu`, the output of `modk.attention` and `modk.decode_attention`,
    of `modk.activation`, `modk.add` and `modk.copy`, and in training the
    gradients that products read (of `modk.activation_grad`,
    `modk.rope_grad`, `modk.attention_grad`'s values and
    `modk.cross_entropy`'s logits). Attention's queries, keys and values
    (q, k and v of `modk.attention`, `modk.attention_grad` and
    `modk.decode_attention`, k and v of `modk.cache_append`) become bf16
    where those and products are their only readers and every write is a
    product marked `round_bf16` (RoPE's included), all of one attention's
    or none. Run before modk-plan-memory, which sizes buffers by their
    bytes.

    Before: `%4 = modk.alloc : memref<?x8x64xf32>` (written by
    `modk.gemm ... {epilogue = #modk.epilogue<swiglu>}`, read by the down
    projection)
    After:  `%4 = modk.alloc : memref<?x8x64xbf16>`

    It also decides which products round what they store: in a bf16 entry,
    a `modk.gemm` whose output is the queries, keys or values that
    attention reads (a rope epilogue, or an output `modk.attention` or
    `modk.decode_attention` reads as q, k or v) gets `round_bf16`, so the
    attention inputs and the KV cache hold bf16 values. That is the model's
    semantics, not a storage choice: it is made with `activations=false`
    too. modk-generalize then spells the rounding in the product's `rows`
    epilogue, RoPE's included.

    With `product-copies` (CUDA targets), a backward product (the output
    gradient of a `modk.gemm_dgrad`, either operand of a `modk.gemm_wgrad`)
    whose f32 operand other kernels also read or update gets a bf16 copy of
    it, made right before the first such product after the buffer's last
    write and read by every product until the next write: a routed block's
    branch gradient, which the down projection's products read and the
    attention path's gradient then accumulates on. The copy rounds what the
    products round anyway, so the results are the same bits; on CUDA the
    products then read bf16 through TMA. modk-generalize writes the copy as
    a row kernel, which modk-fuse-copies folds into the writer where it
    can.

    Before: `modk.gemm_wgrad(%df, %h, ...)` with %df f32, also read by
    `modk.rmsnorm_grad`
    After: `%c = modk.alloc : memref<...xbf16>`, `modk.copy(%df, %c)`,
    `modk.gemm_wgrad(%c, %h, ...)`
  }];
  let options = [
    Option<"activations", "activations", "bool", /*default=*/"true",
           "Store the buffers only products read as bf16 (modc's "
           "--f32-activations sets false: every buffer stays f32, with the "
           "same values)">,
    Option<"productCopies", "product-copies", "bool", /*default=*/"false",
           "Give the backward products a bf16 copy of an f32 operand that "
           "other kernels also read or update (the CUDA pipeline sets it)">
  ];
}

def FuseEpilogues : Pass<"modk-fuse-epilogues", "::modc::modk::EntryOp"> {
  let summary = "Fold the row kernels that finish a GEMM's rows into it";
  let description = [{
    A `modk.add` or `modk.activation` that reads a GEMM's output becomes
    that GEMM's epilogue when the GEMM (epilogue `none`) runs right before
    it and nothing else reads the output: the intermediate rows are never
    stored, and their buffer goes.

    - residual add: `gemm -> %t; add %x, %t -> %y` becomes
      `gemm extra(%x) -> %y {epilogue = residual_add}` (in place when %y
      is %x);
    - activation: `gemm [Wg] -> %g; gemm [Wu] -> %u; activation(%g, %u) ->
      %h` becomes `gemm [Wg, Wu] extra(%g) -> %h {epilogue = swiglu}` (%g
      stays as the epilogue's scratch); gelu likewise with one GEMM.

    Not fused: a value with a second reader, such as training's
    pre-activations (the backward pass reads them) or a routed block's
    attention rows (its gated scatter reads them). Each fusion can be
    switched off (`modc --no-fuse=...`), so that its effect can be measured.
  }];
  let options = [
    Option<"residualAdd", "residual-add", "bool", /*default=*/"true",
           "Fold residual adds into the GEMM that produces their operand">,
    Option<"activation", "activation", "bool", /*default=*/"true",
           "Fold the MLP's activation into its up projection">
  ];
}

def FuseRouterNorm : Pass<"modk-fuse-router-norm", "::modc::modk::EntryOp"> {
  let summary = "Compute a routed block's RMSNorm statistics in the router's pass";
  let description = [{
    A routed layer reads every token of the stream once for its router
    (r = w . x) and then the selected tokens again for the gather's RMSNorm
    (a sum of x^2 a row, then the scaled elements). In general terms: a
    `modk.rows` whose sums read only one buffer, at its rows' tokens, and an
    earlier `modk.rows` over every row of that buffer (the identity row
    set), with nothing between them that may write it. The pass gives the
    earlier kernel the later one's sums: one more sum and one more
    `row_value` output [B, S] each. The later kernel reads each sum as a
    `token_value` input and sums nothing: it reads its rows once.

    Before: the router `access(row, column -> row_value)` with one sum, and
    the gather `access(token, column -> row, row)` with one sum (x^2).
    After:  `%s = modk.alloc : memref<?xSxf32>`, the router
    `access(row, column -> row_value, row_value)` with two sums storing
    w . x and sum(x^2), and the gather
    `access(token, column, token_value -> row, row)` with none.

    This applies to a decode step too: its router reads every sequence's
    token, its gather the routed ones. `enabled=false` (modc
    `--no-fuse=router-norm`) leaves every kernel alone, so that the fusion's
    effect can be measured.
  }];
  let options = [
    Option<"enabled", "enabled", "bool", /*default=*/"true",
           "Give each routed layer's router the RMSNorm statistics">
  ];
}

def Generalize : Pass<"modk-generalize", "::modc::modk::EntryOp"> {
  let summary = "Rewrite the named row kernels into modk.rows with their math";
  let description = [{
    The named row kernels become `modk.rows` ops whose `reduce` and `body`
    regions hold the kernel's arithmetic as `arith` and `math` ops
    (docs/model-format.md section 3, in the order of operations the
    numerics tests pin): `modk.rmsnorm`, `modk.add`, `modk.activation`,
    `modk.embed`, the losses, and training's gradients of the row kernels
    (`modk.activation_grad`, `modk.rmsnorm_grad`, `modk.rope_grad`,
    `modk.embed_grad`, `modk.gather_grad`, `modk.scatter_grad`,
    `modk.router_grad`). (A routed block's router, gather and gated scatter
    are `modk.rows` from the lowering on.) The emitters generate both
    targets' kernels from those regions; they have no kernel of their own
    for the named ops. Run after modk-store-bf16, whose element types the
    rows ops then store.

    `modk.predictor` becomes fc1's product, marked `precision = f32` (the
    predictor is outside a bf16 model's rounding rule), and a `modk.rows`
    with one sum a row; both keep its `causal_only`. `modk.predictor_grad`
    becomes that product again, a `modk.rows` with column sums and a row
    total, and an f32 `modk.gemm_wgrad`.

    A GEMM's named epilogue (residual add, GELU, SwiGLU, RoPE) becomes its
    `rows` epilogue, and so does the rounding of a product that
    modk-store-bf16 marked `round_bf16` (a bf16 entry's values, which
    attention reads: y = extf(truncf(product))) and the store of a plain
    product into a bf16 buffer: the math as arith ops, generated like any
    epilogue. A `modk.copy` from f32 into bf16 becomes a row kernel whose
    body is the element.

    Before: `modk.add %a, %b rows %seg -> %y`
    After:
    ```mlir
    modk.rows ins(%a, %b : ...) rows %seg : memref<?xi64> outs(%y : ...)
    reduce {
    ^bb0(%x: f32, %z: f32):
      modk.yield
    } body {
    ^bb0(%x: f32, %z: f32):
      %s = arith.addf %x, %z : f32
      modk.yield %s : f32
    }
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect"];
}

def FuseRowEpilogues : Pass<"modk-fuse-row-epilogues", "::modc::modk::EntryOp"> {
  let summary = "Fold elementwise modk.rows kernels into the GEMM they finish";
  let description = [{
    A `modk.rows` without row sums that is the only reader of a plain
    GEMM's output, and runs right after it, becomes that GEMM's `rows`
    epilogue: the op moves into the GEMM's region, the product becomes the
    region's block argument, and its buffer goes. Both emitters generate the
    epilogue from the op's math: on CUDA a functor the GEMM tiles apply to
    each element in registers; on the CPU the row kernel over the product
    staged in a per-thread buffer. Run after modk-generalize (which writes
    the routed block's gated scatter as such a kernel) and before
    modk-plan-memory.

    Before:
    ```mlir
    modk.gemm %h, [%w] rows %seg -> %m {epilogue = #modk.epilogue<none>} ...
    modk.rows ins(%a, %m, %r, %x ...) rows %seg ... outs(%x ...) ...
    ```
    After:
    ```mlir
    modk.gemm %h, [%w] rows %seg -> %x {epilogue = #modk.epilogue<rows>} ...
    epilogue {
    ^bb0(%product: memref<?x32x128xf32>):
      modk.rows ins(%a, %product, %r, %x ...) ... outs(%x ...) ...
    }
    ```
    Not fused: a product with another reader (training's down projection
    rows, which the backward pass reads), a kernel with row sums, or one
    whose writes are not elementwise. `modc --no-fuse=rows-epilogue` turns
    it off. With `own-rows=false` it fuses only kernels that write at the
    rows' tokens (the gated scatter), and leaves those written at the
    product's own rows (an activation or an add) as kernels: modc sets it
    when `--no-fuse` names `activation` or `residual-add`, so that what
    modk-fuse-epilogues was told to leave out stays out.
  }];
  let options = [
    Option<"enabled", "enabled", "bool", /*default=*/"true",
           "Fold elementwise row kernels into the GEMM they read">,
    Option<"ownRows", "own-rows", "bool", /*default=*/"true",
           "Also fold kernels written at the product's own rows (not at "
           "tokens)">
  ];
}

def FuseHorizontal : Pass<"modk-fuse-horizontal", "::modc::modk::EntryOp"> {
  let summary = "Stack sibling products of one input into one GEMM";
  let description = [{
    Consecutive `modk.gemm`s that read the same rows of the same input
    (Q, K and V of attention; the gate and up projections of SwiGLU) become
    one product with their weights stacked along N: `y = a [W_1; ...;
    W_g]^T`, a row of y holding the members' products side by side. Each
    member then reads its product through a `modk.column_window` of y:
    - a member with a `rows` epilogue (RoPE, SwiGLU, a bf16 store) keeps
      it, as a row kernel that reads the window, and writes the window in
      place where every reader of its output can read a window (RoPE's Q
      and K);
    - a plain member's output is replaced by its window where every reader
      can read one (modk::ColumnWindowReader: row kernels that map
      elements, attention's q, k and v, an f32 product's input), and is
      otherwise copied from it.
    One product of N = sum N_i reads (and OpenBLAS packs) the input once
    and costs one call, which pays on the CPU where the rows are many
    (docs/compiler.md, stage 5f', has the times). The stacked weight is
    copied each call, which costs about as much as the product of a few
    rows, and at a few rows the stacked product is slower even without the
    copy: a group fuses only where its rows a sequence are at least
    `min-rows` (decode steps keep their products).
    Run after modk-fuse-row-epilogues and before modk-plan-memory; CPU
    targets only (a CUDA GEMM finishes each member's epilogue in its
    tiles, which a stacked product would store and reload).

    Before:
    ```mlir
    modk.gemm %x, [%wq] rows %seg -> %q {epilogue = #modk.epilogue<rows>} ...
    modk.gemm %x, [%wk] rows %seg -> %k {epilogue = #modk.epilogue<rows>} ...
    modk.gemm %x, [%wv] rows %seg -> %v {epilogue = #modk.epilogue<none>} ...
    ```
    After:
    ```mlir
    modk.gemm %x, [%wq, %wk, %wv] rows %seg -> %qkv {epilogue = #modk.epilogue<none>} ...
    %q = modk.column_window %qkv[0] ...
    %k = modk.column_window %qkv[128] ...
    %v = modk.column_window %qkv[256] ...
    modk.rows ins(%q ...) ... outs(%q ...) ...   // RoPE, in place
    modk.rows ins(%k ...) ... outs(%k ...) ...   // RoPE, in place
    modk.attention %q, %k, %v ...
    ```
    Not fused: products of other inputs or row sets, with a CUDA
    configuration, of another precision, or whose epilogue writes at
    tokens or reads the product at tokens. `modc --no-fuse=horizontal`
    turns it off.
  }];
  let options = [
    Option<"enabled", "enabled", "bool", /*default=*/"true",
           "Stack sibling products into one GEMM">,
    Option<"minRows", "min-rows", "int64_t", /*default=*/"16",
           "Fuse only products of at least this many rows a sequence">,
  ];
}

def FuseSelectGather : Pass<"modk-fuse-select-gather", "::modc::modk::EntryOp"> {
  let summary = "Gather each sequence's selected rows in the kernel that selects them";
  let description = [{
    A routed layer selects its rows (`modk.route_select`: top-k, ordered
    compaction) and then gathers them with their attention-norm (a
    `modk.rows` over the rows and positions the selection wrote). This pass
    moves that gather into the selection's `gather` region: both emitters
    then run the selection and the gather of a sequence in one kernel, the
    gather right after the sequence's selection (a work item a sequence on
    the CPU, a thread block a sequence on CUDA), so the routed rows need no
    second pass over the sequences and the selection no second launch.
    Run after modk-generalize and before modk-plan-memory.

    Before:
    ```mlir
    modk.route_select %r -> %pos, %seg, %mask ...
    modk.rows ins(%x, ...) rows %seg ... tokens(%pos ...) outs(%xs, %xn ...) ...
    ```
    After:
    ```mlir
    modk.route_select %r -> %pos, %seg, %mask ... gather {
      modk.rows ins(%x, ...) rows %seg ... tokens(%pos ...) outs(%xs, %xn ...) ...
    }
    ```
    Not fused: a kernel that does not run right after the selection, that
    is not over its rows and positions, that has column sums, or that reads
    or writes the selection's scores or mask. A decode step's
    `modk.decode_select` (the routed sequences' one token each, compacted
    by one block) gets its gather the same way. `enabled=false` (modc `--no-fuse=select-gather`)
    leaves every gather a kernel of its own, so that the fusion's effect
    can be measured.
  }];
  let options = [
    Option<"enabled", "enabled", "bool", /*default=*/"true",
           "Gather the selected rows in the selection's kernel">
  ];
}

def FuseCopies : Pass<"modk-fuse-copies", "::modc::modk::EntryOp"> {
  let summary = "Store a whole-buffer copy in the row kernel that wrote its source";
  let description = [{
    Training copies whole [B, S, width] buffers: a gradient's first
    contribution into the buffer later ones add to, and in a bf16 model an
    f32 gradient into the bf16 copy that products read (modk-generalize
    writes that rounding copy as a row kernel whose body is the element).
    Where the source was last written, at every element of every row, by a
    `modk.rows` of the plan, this pass gives that kernel the copy as one
    more output, which gets the element it yields for the source (rounded
    as it is stored where the copy is bf16), and erases the copy: one pass
    over memory less. Run after the other fusions of row kernels
    (modk-fuse-row-epilogues, modk-fuse-horizontal, modk-fuse-select-gather)
    and before modk-plan-memory.

    Before:
    ```mlir
    modk.rows ins(%x, %w, %dy, %dx ...) rows %all ... outs(%dx, %dw ...) ...
    modk.gemm_wgrad(...)
    modk.rows ins(%dx ...) rows %all ... outs(%dxb : memref<?x256x128xbf16>) ... body {
    ^bb0(%e: f32):
      modk.yield %e : f32
    }
    ```
    After:
    ```mlir
    modk.rows ins(%x, %w, %dy, %dx ...) rows %all ... outs(%dx, %dw, %dxb ...) ...
    modk.gemm_wgrad(...)
    ```
    Not fused: a source whose last writer is not a row kernel of the plan
    over every row (a GEMM or its epilogue, a kernel at tokens or over a
    routed row set, RoPE over heads, a `causal_only` kernel), a source that
    another op may write or a copy that another op reads or writes in
    between, a bf16 source, a view. `enabled=false` (modc
    `--no-fuse=copy`) leaves every copy a pass of its own, so that the
    fusion's effect can be measured.
  }];
  let options = [
    Option<"enabled", "enabled", "bool", /*default=*/"true",
           "Store copies in the kernels that write their sources">
  ];
}

def ConfigureGemms : Pass<"modk-configure-gemms", "::modc::modk::EntryOp"> {
  let summary = "Choose each product's CUDA kernels from the target's description";
  let description = [{
    Sets `config` (#modk.gemm_config) on every `modk.gemm`,
    `modk.gemm_dgrad` and `modk.gemm_wgrad`, from the
    description of the `arch`'s part (SM count, shared memory, whether it
    has wgmma and TMA) and the tiles the kernel library has:

    - path: bf16 products from 64 rows on take wgmma on sm_90a (below,
      and f32 products, mma.sync);
    - TMA: a wgmma product whose A operand is stored bf16 and whose B is a
      weight or stored bf16, with widths in whole 16-byte rows, is fed by
      TMA on a persistent grid of (SMs x CTAs a tile fits on an SM) CTAs;
      a weight B needs its bf16 copy, which a decode step does not make;
    - tile: the large tile from the row count where it still gives a
      wave of CTAs (two on mma.sync and SIMT), below it the small one; a
      RoPE epilogue takes a tile whose warps hold whole heads, and runs as
      its own kernel where none does;
    - split: a weight gradient whose output has few tiles splits its rows
      in up to as many chunks as bring its CTAs to two waves;
    - few rows: a forward product (modk.gemm) of up to `stream-rows` rows
      (a decode step's batch) runs on the `stream` kernel: a CTA of 4
      output columns for 8 rows whose threads split the reduction, so that
      the weight is read from memory once by N / 4 CTAs, rather than by
      N / 64 tiles of 64 rows that compute mostly padding (bench/RESULTS.md
      has the decode steps' times on both);
    - a selection with a fused gather (`modk.route_select` with a
      `gather` region): `gather_blocks`, the blocks each sequence's
      selection and gather run on (each block selects again and gathers
      its share): k / 16 rows, at most a quarter of the SMs, 1 above 8192
      rows (whose positions would not fit a block's shared memory);
    - attention (`modk.attention`, `modk.attention_grad`): `mainloop` is
      `mma` (mma.sync flash attention) where the head dim is a multiple of
      8 up to 128, else `simt`; with `attention=wgmma` (sm_90a), the
      forward and the gradient whose q, k and v are stored bf16 at head
      dim 64 or 128 are `wgmma` (TMA and wgmma; P, the gradient's dS and
      dO rounded to bf16; not yet run on a GPU);
    - `library=cutlass`: a forward bf16 product whose input is stored
      bf16 and whose weight gets its bf16 copy (every entry but decode),
      with a plain epilogue (`none`) or an elementwise `rows` epilogue
      (GemmOp::isElementwiseEpilogue: a residual add, SwiGLU, GELU, a
      bf16 store; on sm_90a one that reads y in place only over rows the
      host knows) or, on sm_90a over rows the host knows, another `rows`
      epilogue without head pairs (the routed block's gated scatter, which
      the kernel stores by itself) or one over heads (RoPE, which runs
      after the kernel's f32 store), takes `cutlass`
      variants above the few-row kernel's rows: from the part's CUTLASS
      tiles, smallest first, each from the row count where it gives a
      wave of CTAs; its cluster where the product has that many row
      tiles, the stages its shared memory holds beside the epilogue's
      (which holds the source that an epilogue reads), and the raster
      order along the dimension with more tiles at the variant's first
      row count. A member of a group (modk-group-gemms) on sm_90a takes
      them `grouped`: its group is one CUTLASS grouped launch whose
      problems the device sizes from the row counts, so its rows count as
      known; so do a group's input gradients, and its weight gradients
      (whose reduction is the device's row count) where the members'
      outputs together fill the part without a split over the rows. The
      input gradients and weight gradients: docs/cuda.md, "CUTLASS".

    The shipped CUDA code chooses nothing at run time: the emitter passes
    each configuration to the kernel library as a template argument. The
    options other than `arch` pin choices, for tests and benchmarks.
  }];
  let options = [
    Option<"arch", "arch", "std::string", /*default=*/"\"sm_90a\"",
           "CUDA architecture: sm_90a (H100-class) or sm_80 (A100-class)">,
    Option<"smCount", "sm-count", "int64_t", /*default=*/"0",
           "SMs of the part (0: the architecture's reference part)">,
    Option<"path", "path", "std::string", /*default=*/"\"auto\"",
           "auto, or the kernel family of every product: simt, mma, or "
           "wgmma (bf16 products; the others take mma); simt also puts "
           "attention on its SIMT mainloop">,
    Option<"tile", "tile", "std::string", /*default=*/"\"auto\"",
           "auto, small or large: the tile of every product, at any rows">,
    Option<"tma", "tma", "bool", /*default=*/"true",
           "Feed wgmma products by TMA where their operands allow it">,
    Option<"tmaCtas", "tma-ctas", "int64_t", /*default=*/"0",
           "CTAs of a TMA product's persistent grid (0: as many as the "
           "part holds at once)">,
    Option<"wgradChunkRows", "wgrad-chunk-rows", "int64_t", /*default=*/"0",
           "Rows of a chunk of every weight gradient's split (0: split by "
           "shape)">,
    Option<"gatherBlocks", "gather-blocks", "int64_t", /*default=*/"0",
           "Blocks a sequence of every selection with a fused gather (0: "
           "by k and the part's SMs; at most k; 1 above k = 8192)">,
    Option<"streamRows", "stream-rows", "int64_t", /*default=*/"64",
           "Forward products of up to this many rows take the few-row "
           "kernel, which reads the weight once (0: none; a pinned path "
           "or tile puts every row count on it)">,
    Option<"streamSimtRows", "stream-simt-rows", "int64_t", /*default=*/"8",
           "bf16 products on the few-row kernel take its CUDA-core tile up "
           "to this many rows (one CTA along the rows) and its tensor-core "
           "tile above (0: tensor cores at any rows)">,
    Option<"cutlassFrom", "cutlass-from", "int64_t", /*default=*/"0",
           "library=cutlass: the row count from which products run on "
           "CUTLASS (0: by the part's tiles, above the few-row kernel's "
           "rows; 1: every row count, for tests that cover the kernels "
           "at small shapes)">,
    Option<"attention", "attention", "std::string", /*default=*/"\"auto\"",
           "auto (flash attention on mma.sync where the head dim allows, "
           "else SIMT) or wgmma (sm_90a: the forward and the gradient of "
           "bf16 q, k, v at head dims 64 and 128 on the TMA and wgmma "
           "kernels; the rest as auto)">,
    Option<"library", "library", "std::string", /*default=*/"\"tiles\"",
           "tiles (the hand-written kernels) or cutlass: forward bf16 "
           "products with a plain or (sm_90a) an elementwise epilogue "
           "whose operands are stored bf16 "
           "(or a weight's bf16 copy) take CUTLASS kernels above the "
           "few-row kernel's rows, their tile, cluster, stages, schedule "
           "and raster order from the part's description (CudaTargets.h)">
  ];
}

def GenerateOptimizer : Pass<"modk-generate-optimizer", "::mlir::ModuleOp"> {
  let summary = "Write the AdamW step of each training entry as a modk.optimizer";
  let description = [{
    Adds `modk.optimizer @adamw` beside `modk.entry @grad`, over the same
    parameters, with the decoupled AdamW update of one element as its body
    (docs/model-format.md, "The AdamW step"):

        g' = g · grad_scale
        m' = beta1 · m + (1 − beta1) · g'
        v' = beta2 · v + (1 − beta2) · g' · g'
        p' = p · decay − step_size · m' / (sqrt(v') · inv_sqrt_bc2 + eps)

    and the gradient norm's term of one element (g · g, in f64) as its
    `norm` region. The emitters generate `modc_adamw`'s element loop and the
    norm's sum from them. A module without a training entry, or with an
    optimizer already, is left alone.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
}

def KeepBf16Weights : Pass<"modk-keep-bf16-weights", "::mlir::ModuleOp"> {
  let summary = "Keep the weights that bf16 products stream as bf16 on the device";
  let description = [{
    For a CUDA target, after modk-configure-gemms. A bf16 product whose
    configuration feeds its weight through TMA (a `wgmma ... tma N`
    variant) or through a CUTLASS kernel reads that weight as bf16 from
    global memory, so the weight needs a bf16 copy on the device; a decode
    step's few-row products (`stream`) read the copy too, half the bytes of
    the f32 weight they would otherwise stream. This pass
    sets `bf16_copies` on the `modk.optimizer`: a parameter is flagged when
    a product of any entry reads it as its weight (`modk.gemm`'s weights,
    `modk.gemm_dgrad`'s weight) and that product rounds its operands to
    bf16 with such a configuration. The optimizer's update then writes the
    new bf16 copy of each flagged parameter in the same kernel that writes
    its f32 master, so no forward rounds the weights again after a step.
    A module without a `modk.optimizer`, or whose products all read f32
    weights (an f32 model, sm_80, the causal predictor's f32 products), is
    left alone.

    Before: `modk.optimizer @adamw attributes {params = [...]}`
    After:  `modk.optimizer @adamw attributes {bf16_copies = array<i1: true,
    false>, params = [...]}`
  }];
  let options = [
    Option<"enabled", "enabled", "bool", /*default=*/"true",
           "Keep bf16 copies of the weights between calls (modc's "
           "--f32-weights sets false: AdamW updates the f32 weights only, "
           "decode streams them, and every call rounds what TMA reads)">
  ];
}

def GroupGemms : Pass<"modk-group-gemms", "::modc::modk::EntryOp"> {
  let summary = "Mark independent products or row kernels of one shape as one grouped launch";
  let description = [{
    The experts of an MoE MLP (docs/model-format.md section 7) are E
    products of the same shape on E row sets of their own: E small launches
    where one would fill the GPU. This pass gives neighbouring `modk.gemm`s
    that can run as one launch the same `group` number, and moves a later
    member up next to the earlier ones where nothing in between reads or
    writes what it touches. The CUDA emitter then writes one grouped call:
    the members' tiles in one grid, z the member, each with its own input,
    weight, row set, output and epilogue buffers. The C++ emitter runs the
    members as the tiles of one parallel region (modk_cpu::run_group).

    Members of a group have:
    - row sets of their own (products of one row set are stacked instead,
      where that pays: modk-fuse-horizontal);
    - the same weight shapes, input and output types, epilogue kind,
      precision and bf16 rounding, and no causal_only;
    - structurally equal `rows` epilogues (one generated functor), none over
      heads (RoPE: its tiles may keep the epilogue apart);
    - no dependence on each other: none writes what another reads or
      writes, except a `rows` epilogue's scatter-add at the tokens of one
      expert of a `modk.moe_select` into the buffer another expert of the
      same select adds into (an MoE token goes to one expert at most).

    In `@grad` the experts' input gradients (`modk.gemm_dgrad`, with equal
    `accumulate`) and weight gradients (`modk.gemm_wgrad`) are grouped the
    same way. A later expert's product moves up together with the kernels
    between that it depends on (its chain's row kernels and ungrouped
    products, at most 16), where nothing they pass reads or writes what
    they touch. Two gradient products that write one buffer are never
    grouped: they write its first rows, which the IR cannot prove apart.

    The experts' row kernels are grouped too (`rows`, on by default): the
    `modk.rows` ops between their products (the gathers, the activations
    and gated scatters, and in `@grad` the gated scatters' gradients, the
    activations' gradients and the gathers' gradients into the stream's)
    that generate one warp-per-row kernel (structurally equal, the same
    operand types and accesses; no row or column sums, no scatter into a
    table, not over heads, not causal_only), on row sets of their own, get
    one `group` number under the same rules: no dependence on each other,
    except writes at the tokens of different experts of one
    `modk.moe_select` (a gated scatter's add into the stream, a gather's
    gradient's add into the stream's gradient, a scatter gradient's gate
    gradient at its tokens); a later member moves up with what it needs.
    The CUDA emitter launches them as one kernel whose grid's y is the
    member, each reading its own buffers and row count from a table.

    At most `max-members` products (or row kernels) a group (at most 16, the grouped
    kernels' table; more is refused). Run before modk-plan-memory
    (moving a product changes lifetimes); CUDA targets only (the CPU
    emitter runs the members one after another). `modc --no-fuse=group`
    turns it off.

    Before:
    ```mlir
    modk.gemm %x0, [%wg0] rows %s0 -> %g0 {epilogue = #modk.epilogue<none>} ...
    modk.gemm %x0, [%wu0] rows %s0 -> %h0 {epilogue = #modk.epilogue<rows>} ...
    modk.gemm %x1, [%wg1] rows %s1 -> %g1 {epilogue = #modk.epilogue<none>} ...
    modk.gemm %x1, [%wu1] rows %s1 -> %h1 {epilogue = #modk.epilogue<rows>} ...
    ```
    After:
    ```mlir
    modk.gemm %x0, [%wg0] rows %s0 -> %g0 {epilogue = ..., group = 0} ...
    modk.gemm %x1, [%wg1] rows %s1 -> %g1 {epilogue = ..., group = 0} ...
    modk.gemm %x0, [%wu0] rows %s0 -> %h0 {epilogue = ..., group = 1} ...
    modk.gemm %x1, [%wu1] rows %s1 -> %h1 {epilogue = ..., group = 1} ...
    ```
  }];
  let options = [
    Option<"enabled", "enabled", "bool", /*default=*/"true",
           "Group independent products of one shape">,
    Option<"maxMembers", "max-members", "int64_t", /*default=*/"16",
           "Products a group holds at most (the grouped launch's table)">,
    Option<"rows", "rows", "bool", /*default=*/"true",
           "Group the experts' row kernels (modk.rows) too">,
  ];
}

def FoldZeroFills : Pass<"modk-fold-zero-fills", "::modc::modk::EntryOp"> {
  let summary = "Let a weight gradient's first product write it, not a zero fill";
  let description = [{
    Training zeroes each weight gradient, and every `modk.gemm_wgrad` adds
    dY^T A into it. Where the first op after a `modk.zero` that touches its
    buffer is a `modk.gemm_wgrad` into that whole buffer, which reads it
    through no other operand, the product gets `overwrite` (dW = dY^T A; a
    product of no rows writes zeros) and the fill is erased: one pass over
    the gradient's memory less, and no read of the zeros. A later product
    into the same gradient (a tied embedding's) still adds.

    Not folded: a gradient that another op touches first (a norm's weight
    gradient, a kernel that adds at tokens), a product nested in a region,
    a fill or product through a view. Run before modk-plan-memory (the fill
    was the buffer's first use). CPU targets only: the CUDA weight gradient
    kernels always add (the CUDA emitter refuses `overwrite`).
    `modc --no-fuse=zero-fill` turns it off.

    Before:
    ```mlir
    modk.zero(%dw) : memref<512x256xf32>
    ...
    modk.gemm_wgrad(%dy, %a, %rows, %dw) : ...
    ```
    After:
    ```mlir
    modk.gemm_wgrad(%dy, %a, %rows, %dw) {overwrite} : ...
    ```
  }];
  let options = [
    Option<"enabled", "enabled", "bool", /*default=*/"true",
           "Fold zero fills into the weight gradients' first products">,
  ];
}

def GroupSiblings : Pass<"modk-group-siblings", "::modc::modk::EntryOp"> {
  let summary = "Mark a decode step's products of one input as one launch";
  let description = [{
    A decode step multiplies a few rows (one a sequence) by each weight, and
    on a GPU each such product is a launch that reads its weight once: the
    queries', keys' and values' products are three launches of one input,
    where the step is bound by its launches. In a decode entry this pass
    gives neighbouring `modk.gemm`s that can run as one launch of the
    few-row kernel the same `siblings` number; the CUDA emitter then writes
    one call that runs every member's columns in one grid (z the member),
    each with its own weight, epilogue (RoPE and the bf16 store included)
    and output, and each member's own launch where the configuration does
    not take the few-row kernel for the step's rows.

    Siblings have the same input, row set, reduction and bf16 rounding, one
    weight each, no `group` and no `causal_only`, a configuration whose
    first variant is the few-row kernel and none on CUTLASS, and none reads
    or writes a buffer that another writes, except an elementwise epilogue
    reading an earlier member's plain product at its own elements (SwiGLU's
    up projection and its gate): those are also `siblings_in_order`, each
    CTA running the members in turn. Run after modk-configure-gemms.
    `modc --no-fuse=siblings` turns it off.

    Before:
    ```mlir
    modk.gemm %n, [%wq] rows %seg -> %q {config = #modk.gemm_config<stream 8x4, ...>, ...}
    modk.gemm %n, [%wk] rows %seg -> %k {config = ...}
    modk.gemm %n, [%wv] rows %seg -> %v {config = ...}
    ```
    After: the same with `siblings = 0` on each.
  }];
  let options = [
    Option<"enabled", "enabled", "bool", /*default=*/"true",
           "Mark sibling products of a decode step">,
  ];
}

def PlanMemory : Pass<"modk-plan-memory", "::modc::modk::EntryOp"> {
  let summary = "Place every workspace buffer, reusing memory by liveness";
  let description = [{
    Buffers whose live ranges (first to last kernel that touches them) do not
    overlap share memory: first-fit placement in three orders (first use,
    largest first, latest last use first), the smallest plan kept. The
    members of a group (modk-group-gemms: neighbouring kernels with one
    `group` number) run as one launch, so they count as one kernel. Sets
    `offset` (bytes per sequence) on each `modk.alloc` and
    `workspace_bytes_per_sequence` on the entry.
  }];
}

#endif // MODC_DIALECT_MODK_TRANSFORMS_PASSES
