#pragma once
// One point of an experiment matrix, fully resolved, with its canonical text and stable key.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.hpp"
#include "base/named_enum.hpp"
#include "base/number_text.hpp"
#include "harness/matrix/sequence_lengths.hpp"
#include "kernels/compute/dropout.hpp"
#include "kernels/compute/fp32_gemm.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/recompute.hpp"
#include "kernels/model/variant.hpp"

namespace sweetspot {

// Where the GPU forward keeps its activations: device memory, or managed memory (which then
// competes with managed weights for the device).
enum class Activations { device, managed };
template <>
struct EnumNames<Activations> {
    static constexpr std::array<EnumName<Activations>, 2> list = {
        {{Activations::device, "device"}, {Activations::managed, "managed"}}};
};

// How the GPU forward puts a unit's kernels on the stream: one launch each, or captured once as a
// CUDA graph and launched as one (kernels/compute/unit_graphs.hpp), which takes the host less time.
enum class Launch { kernels, graphs };
template <>
struct EnumNames<Launch> {
    static constexpr std::array<EnumName<Launch>, 2> list = {{{Launch::kernels, "kernels"}, {Launch::graphs, "graphs"}}};
};

enum class Mode { infer, train };
template <>
struct EnumNames<Mode> {
    static constexpr std::array<EnumName<Mode>, 2> list = {{{Mode::infer, "infer"}, {Mode::train, "train"}}};
};

// The phases of a step, each timed on its own: a forward for `infer`; a forward (with the loss),
// a backward and the optimizer's update for `train`.
enum class StepPhase { forward, backward, optimizer };
template <>
struct EnumNames<StepPhase> {
    static constexpr std::array<EnumName<StepPhase>, 3> list = {
        {{StepPhase::forward, "forward"}, {StepPhase::backward, "backward"}, {StepPhase::optimizer, "optimizer"}}};
};
// The phases a step of `mode` runs, in order.
std::span<const StepPhase> step_phases(Mode mode);

// Injected failures, so the harness's own crash handling can be tested end to end.
enum class DebugFault { none, segfault, abort, hang, exit };
template <>
struct EnumNames<DebugFault> {
    static constexpr std::array<EnumName<DebugFault>, 5> list = {{{DebugFault::none, "none"},
                                                                  {DebugFault::segfault, "segfault"},
                                                                  {DebugFault::abort, "abort"},
                                                                  {DebugFault::hang, "hang"},
                                                                  {DebugFault::exit, "exit"}}};
};

// Bounds of the integer axes, far above any real sweep. They keep a cell's derived sizes from
// overflowing (batch × seq × vocab logits, streaming slots = depth + 1) and its loops and
// allocations from growing with a mistyped number.
struct AxisLimits {
    static constexpr int tokens = 1 << 20;  // batch × seq, tokens per forward
    static constexpr int streams = 1024;
    static constexpr int prefetch_depth = ModelLimits::layers;
    static constexpr int iterations = 1'000'000;  // warmups, iterations, trace_iterations each
    static constexpr int repeats = 1000;
    // 2^53 (8 PiB): every byte count up to it is exact in a double, as Budget stores it.
    static constexpr std::int64_t budget_bytes = std::int64_t{1} << 53;
    // Starting a cell process and building even the smallest model takes a good part of a
    // second, so a shorter per-cell timeout could only time out.
    static constexpr double min_timeout_s = 1.0;
};

// prefetch = "off" | "jit" | look-ahead depth in layers (an integer from 1 to
// AxisLimits::prefetch_depth).
struct Prefetch {
    enum class Kind { off, jit, depth } kind = Kind::off;
    int depth = 0;

    std::string text() const;
    static std::optional<Prefetch> parse(std::string_view s);  // "off", "jit", "3"
    bool operator==(const Prefetch&) const = default;
};

// budget = device bytes the backend may keep weights in: bytes, "12GiB"/"512MB" (decimal and
// binary units), or "50%" of the weights. Sizes are exact ("2.01KB" is 2010 bytes, the fraction of
// a byte dropped) and at most AxisLimits::budget_bytes.
struct Budget {
    enum class Kind { bytes, percent } kind = Kind::percent;
    double value = 100.0;

    std::string text() const;
    static std::optional<Budget> parse(std::string_view s);
    // Bytes, or the percentage of `weight_bytes` as text() spells it, rounded down, computed
    // exactly (in integers, not doubles). Throws std::invalid_argument for negative weights or a
    // percentage parse() does not give.
    std::int64_t resolve(std::int64_t weight_bytes) const;
    bool operator==(const Budget&) const = default;
};

// "90s", "10m", "1h", "1.5m", or a plain number of seconds.
std::optional<double> parse_duration_s(std::string_view s);

// A cell's parameters. The initialisers are the axes' defaults (what a matrix leaves unset);
// harness/matrix/axes.hpp declares how each is written, keyed, stored and shown.
struct CellParams {
    std::string sweep;  // the sweep that produced the cell; cosmetic, not part of the key
    ModelConfig model = find_builtin_model("tiny").value();
    Variant variant;  // baseline
    BackendId backend = BackendId::host;
    DType dtype = DType::fp32;
    int batch = 1;
    // The longest a sequence may be: every sequence's length with `lengths` fixed, the bound its
    // drawn lengths are clipped to otherwise.
    int seq = 64;
    LengthSpec lengths;                 // fixed: every sequence `seq` tokens, a rectangular batch
    Packing packing = Packing::padded;  // how a ragged batch lies in the activations' rows
    int streams = 1;
    Prefetch prefetch;
    Budget budget;
    Activations activations = Activations::device;
    ResidentPolicy resident = ResidentPolicy::interleaved;  // which layers a budget keeps on the device
    UvmEvict evict = UvmEvict::migrate;                     // how the UVM backends evict a layer
    bool tf32 = false;                                      // fp32 GEMMs on TF32 tensor cores
    bool split_tf32 = false;  // fp32 GEMMs as three TF32 products of split operands (fp32's accuracy)
    Launch launch = Launch::kernels;                        // how the GPU forward enqueues a unit's kernels
    Recompute recompute = Recompute::gelu;  // what a training step's backward computes again (recompute.hpp)
    StateHome optimizer = StateHome::device;  // where a training step's AdamW keeps its state and runs
    double max_grad_norm = 1;  // the global gradient norm a training step clips to; 0: no clipping
    double dropout = 0;                                     // probability at each dropout site
    Mode mode = Mode::infer;
    std::string weights = "synthetic";  // or a path to a .safetensors checkpoint
    int warmups = 1;
    int iterations = 5;
    int trace_iterations = 0;
    // The noise criterion (none of it part of the key): after `iterations`, keep iterating while
    // the timed iterations' noise (relative standard deviation, %) is above max_noise_pct, up to
    // max_iterations in all (0: no more than `iterations`) and max_time_s of timed iterations
    // (0: no limit). A cell that stops above it is flagged noisy. max_noise_pct 0: no criterion.
    // The default 2 % is above the noise of every `device` cell of the layer-fusion study and
    // below that of most UVM cells (docs/benchmarks-history.md has the figures).
    double max_noise_pct = 2;
    int max_iterations = 0;
    double max_time_s = 0;
    std::uint64_t seed = 1;
    int repeat = 1;  // the same measurement again, as a cell of its own (run-to-run spread)
    double timeout_s = 600;  // not part of the key: it bounds the run, it does not change it
    DebugFault debug_fault = DebugFault::none;

    // Bytes of all weights in the cell's dtype as laid out (tensors aligned for the GPU). Throws
    // std::invalid_argument for a shape ModelConfig::validate refuses, std::overflow_error when
    // the size does not fit in 64 bits.
    std::int64_t weight_bytes() const;
    std::int64_t budget_bytes() const { return budget.resolve(weight_bytes()); }
    // How the cell's fp32 GEMMs compute, from tf32 and split_tf32 (cell_impossible_reason refuses
    // a cell with both).
    Fp32Gemm fp32_gemm() const {
        return split_tf32 ? Fp32Gemm::split_tf32 : tf32 ? Fp32Gemm::tf32 : Fp32Gemm::exact;
    }

    // Sorted "name=value" lines of every keyed axis (axes.hpp), the model's shape included (so
    // redefining a custom model changes the key).
    std::string canonical() const;
    // 16 hex digits: FNV-1a 64 of canonical().
    std::string key() const;
    // canonical() and the settings that are not part of the key (the timeout, the noise
    // criterion): all a cell process needs to measure the cell as the matrix says.
    std::string full_text() const;
    // Inverse of canonical() and of full_text(); throws std::invalid_argument on malformed text.
    static CellParams from_canonical(std::string_view text);
    // The batch's shape: `batch` sequences of lengths drawn from `seed` (draw_lengths), padded to
    // the longest or packed; rectangular (batch × seq) with `lengths` fixed. Throws what
    // draw_lengths throws for a length file it cannot read.
    BatchShape batch_shape() const;
    // The cell's input, one id per row of batch_shape(): each real token the next id of the
    // random stream drawn from `seed`, sequence by sequence (a rectangular batch: batch × seq ids
    // of the stream, as cuda-uvm-gpt2 fed its model), each padding row id 0, a valid one.
    std::vector<std::int32_t> token_ids() const;
    // The next-token targets of a training step, one per row of batch_shape() as token_ids: the
    // ids token_ids draws continued by one more draw, shifted by one, so each real token's target
    // is the token after it in one stream (as a language-model batch is cut from a text; a
    // sequence's last target is the next sequence's first token), laid out as token_ids lays out
    // the tokens. Each padding row holds 0, which the training step ignores: its loss counts the
    // real rows only (CpuBackprop).
    std::vector<std::int32_t> target_ids() const;
    // The cell's dropout: its probability, the masks keyed by `seed`, as every forward draws them.
    Dropout dropout_masks() const { return Dropout{static_cast<float>(dropout), seed}; }
    // One line for progress output: "gpt2_small host fp32 b1 s64".
    std::string label() const;
};

std::string fnv1a64_hex(std::string_view data);

// The SQL expression of the value of the line `name` of a canonical text (CellParams::canonical)
// held in the column `column`, as text; NULL where the text has no such line.
std::string canonical_line_sql(std::string_view column, std::string_view name);

}  // namespace sweetspot
