#pragma once
// One point of an experiment matrix, fully resolved, with its canonical text and stable key.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend_registry.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/model_config.hpp"

namespace sweetspot {

// The names each enumerated axis accepts, in the order the docs list them.
inline const std::vector<std::string> kBackendNames = backend_names();
inline const std::vector<std::string> kVariantNames = {"baseline", "dropout_ln", "attn_ln", "ffn_ln", "attn_proj", "all"};
inline const std::vector<std::string> kActivationNames = {"device", "managed"};
inline const std::vector<std::string> kModeNames = {"infer", "train"};
inline const std::vector<std::string> kResidentNames = {"interleaved", "first", "last"};
inline const std::vector<std::string> kEvictNames = {"migrate", "read-mostly"};
// Injected failures, so the harness's own crash handling can be tested end to end.
inline const std::vector<std::string> kDebugFaultNames = {"none", "segfault", "abort", "hang", "exit"};

// Bounds of the integer axes, far above any real sweep. They keep a cell's derived sizes from
// overflowing (batch × seq × vocab logits, streaming slots = depth + 1) and its loops and
// allocations from growing with a mistyped number.
struct AxisLimits {
    static constexpr int tokens = 1 << 20;  // batch × seq, tokens per forward
    static constexpr int streams = 1024;
    static constexpr int prefetch_depth = ModelLimits::layers;
    static constexpr int iterations = 1'000'000;  // warmups, iterations, trace_iterations each
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

struct CellParams {
    std::string sweep;  // the sweep that produced the cell; cosmetic, not part of the key
    ModelConfig model;
    std::string variant = "baseline";
    std::string backend = "host";
    DType dtype = DType::fp32;
    int batch = 1;
    int seq = 64;
    int streams = 1;
    Prefetch prefetch;
    Budget budget;
    std::string activations = "device";
    std::string resident = "interleaved";  // which layers a budget keeps on the device
    std::string evict = "migrate";         // how the UVM backends evict a layer
    bool tf32 = false;                     // fp32 GEMMs on TF32 tensor cores
    std::string mode = "infer";
    std::string weights = "synthetic";  // or a path to a .safetensors checkpoint
    int warmups = 1;
    int iterations = 5;
    int trace_iterations = 0;
    std::uint64_t seed = 1;
    double timeout_s = 600;  // not part of the key: it bounds the run, it does not change it
    std::string debug_fault = "none";

    // Bytes of all weights in the cell's dtype as laid out (tensors aligned for the GPU). Throws
    // std::invalid_argument for a shape ModelConfig::validate refuses, std::overflow_error when
    // the size does not fit in 64 bits.
    std::int64_t weight_bytes() const;
    std::int64_t budget_bytes() const { return budget.resolve(weight_bytes()); }

    // Sorted "name=value" lines of everything that defines the measurement, the model's
    // shape included (so redefining a custom model changes the key). Axes added after the
    // first release appear only when they differ from their default, so keys of cells that do
    // not use them stay what they were.
    std::string canonical() const;
    // 16 hex digits: FNV-1a 64 of canonical().
    std::string key() const;
    // Inverse of canonical(); throws std::invalid_argument on malformed text.
    static CellParams from_canonical(std::string_view text);
    // The cell's input: batch × seq random token ids drawn from `seed`, as cuda-uvm-gpt2 fed its model.
    std::vector<std::int32_t> token_ids() const;
    // One line for progress output: "gpt2_small host fp32 b1 s64".
    std::string label() const;
};

std::string fnv1a64_hex(std::string_view data);
// Shortest exact-enough text of a number ("%.9g"), as used in canonical cell text and in
// messages ("1e-300", where std::to_string says "0.000000").
std::string format_number(double v);

}  // namespace sweetspot
