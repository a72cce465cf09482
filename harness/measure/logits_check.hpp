#pragma once
// The numerical check stored with every cell, and the verdict it gives: a cell's logits against
// a reference forward on the same weights (the fp32 host forward for GPU cells, float64 loops
// for host cells). Every path ends in judge_output, so a NaN cannot pass on one path and fail on
// another.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "harness/matrix/cell.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "kernels/model/layer_source.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

struct LogitsCheck {
    std::string reference;  // what was compared, for the cells table
    double max_abs_err = 0, rel_err = 0, tolerance = 0;
    // The reference logits, where the database keeps them for later cells (kept_reference_key).
    std::optional<ReferenceLogits> kept;
    // Whether the reference forward ran (false: the kept reference of an earlier cell was reused).
    bool reference_computed = true;
    // Wall time of running it (making the weights on the host included), where it is kept: the
    // cell's `reference` phase, told apart from `check` because one cell of a workload spends it
    // for all.
    double reference_seconds = 0;
    std::string compared = "logits";  // what of the output, for the verdict's reason
    bool passed() const { return rel_err <= tolerance; }  // false for NaN too
};

// The largest |out − ref| and |ref| over the pairs it is given. std::max(err, NaN) keeps err, so
// a plain running maximum would let NaN output pass; here a NaN difference becomes the error.
class ErrorMeasure {
public:
    void add(double out, double ref);
    double max_abs_err() const { return max_abs_err_; }
    // max |out − ref| / max |ref|, or the absolute error when the reference is all zero.
    double rel_err() const { return max_ref_ > 0 ? max_abs_err_ / max_ref_ : max_abs_err_; }

private:
    double max_abs_err_ = 0, max_ref_ = 0;
};

// The float64 reference runs as plain loops; above this many multiply-adds (a forward's) it would
// take longer than the measurement itself, and the cell is stored as not checked.
inline constexpr double kMaxFloat64Macs = 2e9;

// Relative error (max |out - ref| / max |ref|) allowed for fp32 host output against float64.
inline constexpr double kHostFp32Tolerance = 1e-4;

// How many values are NaN or infinite.
std::size_t count_nonfinite(std::span<const float> values);

// Relative error (max |out − ref| / max |ref|) allowed for a GPU cell of this dtype.
double gpu_tolerance(DType dtype, bool tf32);

// The key under which a results database keeps the host reference `cell` is checked against with
// these tokens, or nullopt when it is not kept (for `train`, step_check.hpp's kept_training_key):
// the reference of a prefix check (large models,
// whose host forward takes seconds: making the weights on the host is most of it) on synthetic
// weights. A full check is cheap to recompute and large to keep; a checkpoint file may change
// under its path. The key hashes what the reference depends on: the model's name and every field
// of kModelFields (model_fields_text), the weights' seed and dtype (the host rounds them through
// it), the dropout masks, and the prefix's tokens. A ragged batch's prefix is its first sequence's
// first positions, the same forward as a rectangular one's of those tokens, so they share a key.
std::optional<std::string> kept_reference_key(const CellParams& cell, std::span<const std::int32_t> tokens);

// The part of a cell's output (its BatchShape's rows) that check_against_host recomputes on the
// host: all of it, or the first positions of sequence 0 (rows 0 .. n−1 in either packing).
BatchShape host_reference_shape(const CellParams& cell);

// The rows of a cell's logits [rows, vocab] that check_against_host compares (those of
// host_reference_shape). A caller need only fetch these from the device.
std::int64_t host_reference_rows(const CellParams& cell);

// Compares `logits` [rows, vocab] (at least its first host_reference_rows rows) with the host
// forward, real rows only. The whole output is recomputed, over the cell's BatchShape,
// when that is cheap; otherwise the first positions of sequence 0, which by causality depend only
// on those tokens, so the comparison is exact in kind, only shorter. `kept`: reference logits an
// earlier cell left, used instead of the host forward when their key is this check's.
LogitsCheck check_against_host(const CellParams& cell, const WeightLayout& layout,
                               std::span<const std::int32_t> tokens, std::span<const float> logits,
                               const std::optional<ReferenceLogits>& kept = std::nullopt);

// Compares fp32 host logits, laid out as `shape`, with float64 loops over the same weights
// (acquired from `weights`): each sequence's real rows with its logits computed alone, padding
// rows never. nullopt when the model is too large for the loops to finish in reasonable time.
std::optional<LogitsCheck> check_against_float64(const CellParams& cell, const WeightLayout& layout, LayerSource& weights,
                                                 const BatchShape& shape, std::span<const std::int32_t> tokens,
                                                 std::span<const float> logits);
// nullopt when the model is too large for the loops to finish in reasonable time.
std::optional<LogitsCheck> check_against_float64(const CellParams& cell, const WeightLayout& layout, LayerSource& weights,
                                                 std::span<const std::int32_t> tokens, std::span<const float> logits);

// The NaN or infinite values among a step's output, counted over all of it.
struct OutputCount {
    std::int64_t nonfinite = 0;
    std::int64_t total = 0;
    std::string what = "logits";  // what the values are, for the verdict's reason
};

// Stores `check` in the outcome and sets its status: `failed` when any of the output's values is
// NaN or infinite (whether or not a reference was computed: such output is wrong whatever it is
// compared with), `invalid` when the check is outside its tolerance, `ok` otherwise.
void judge_output(const OutputCount& output, const std::optional<LogitsCheck>& check, CellOutcome& out);

}  // namespace sweetspot
