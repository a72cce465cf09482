#include "harness/measure/logits_check.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "harness/measure/cell_weights.hpp"
#include "harness/measure/step_check.hpp"
#include "kernels/compute/cpu_forward.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/model_fields.hpp"
#include "kernels/compute/reference_forward.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {
namespace {

// Above this many flops the host recomputes a prefix only (a few seconds on a 16-core host).
constexpr double kFullCheckFlops = 4e11;
constexpr int kPrefixPositions = 16;


double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The cell's weights (synthetic or from its checkpoint) made on demand, one unit at a time,
// rounded through the cell's dtype: the reference sees exactly the weights the GPU saw without
// holding a second copy of the model.
class CellUnits final : public LayerSource {
public:
    CellUnits(const CellParams& cell, const WeightLayout& layout)
        : layout_(layout), dtype_(cell.dtype), fill_(make_unit_filler(cell, layout)) {}

    const void* acquire(int unit) override {
        const auto n = static_cast<std::size_t>(layout_.units[static_cast<std::size_t>(unit)].numel);
        buffer_.resize(n);
        fill_(unit, buffer_);
        round_through_dtype(buffer_, dtype_);
        return buffer_.data();
    }
    void release(int) override {}

private:
    const WeightLayout& layout_;
    DType dtype_;
    Backend::UnitFiller fill_;
    std::vector<float> buffer_;
};

// The part of a cell's output the host check recomputes, and its tokens (one per row of `shape`).
struct HostReferencePart {
    BatchShape shape;
    bool full = false;
    std::vector<std::int32_t> tokens;
};

// The part the host check recomputes, without its tokens, the cell's lengths drawn once: the whole
// output where that is cheap (counted over the shape's rows: a padded batch's padding is computed
// too), else a prefix of sequence 0, rows 0 .. n−1 in both packings.
HostReferencePart reference_part_shape(const CellParams& cell) {
    BatchShape shape = cell.batch_shape();
    const bool full = 2.0 * static_cast<double>(n_params(cell.model)) * static_cast<double>(shape.rows()) <= kFullCheckFlops;
    if (!full) shape = BatchShape::rectangular(1, std::min(shape.length(0), kPrefixPositions));
    return {std::move(shape), full, {}};
}

HostReferencePart host_reference_part(const CellParams& cell, std::span<const std::int32_t> tokens) {
    HostReferencePart part = reference_part_shape(cell);
    const auto rows = static_cast<std::size_t>(part.shape.rows());
    part.tokens.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(rows));
    return part;
}

// kept_reference_key for the part the check recomputes.
std::optional<std::string> key_of(const CellParams& cell, const HostReferencePart& part) {
    if (part.full || cell.weights != kSyntheticWeights) return std::nullopt;
    const ModelConfig& m = cell.model;
    std::ostringstream text;
    text << std::hexfloat << "host fp32 reference 2|model " << m.name << ' ' << model_fields_text(m) << "|seed "
         << cell.seed << "|dtype " << enum_name(cell.dtype) << "|dropout " << cell.dropout << "|batch "
         << part.shape.batch() << "|seq " << part.shape.stride() << "|tokens";
    for (const std::int32_t t : part.tokens) text << ' ' << t;
    return fnv1a64_hex(text.str());
}

}  // namespace

void ErrorMeasure::add(double out, double ref) {
    const double diff = std::abs(out - ref);
    if (std::isnan(diff) || std::isnan(max_abs_err_))
        max_abs_err_ = std::numeric_limits<double>::quiet_NaN();
    else
        max_abs_err_ = std::max(max_abs_err_, diff);
    max_ref_ = std::max(max_ref_, std::abs(ref));
}

std::size_t count_nonfinite(std::span<const float> values) {
    return static_cast<std::size_t>(std::count_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); }));
}

double gpu_tolerance(DType dtype, bool tf32) {
    switch (dtype) {
        case DType::fp32: return tf32 ? 5e-3 : 1e-4;
        case DType::fp16: return 2e-2;
        case DType::bf16: return 6e-2;
    }
    return 0;
}

std::optional<std::string> kept_reference_key(const CellParams& cell, std::span<const std::int32_t> tokens) {
    if (cell.mode == Mode::train) return kept_training_key(cell, tokens);
    return key_of(cell, host_reference_part(cell, tokens));
}

BatchShape host_reference_shape(const CellParams& cell) { return reference_part_shape(cell).shape; }

std::int64_t host_reference_rows(const CellParams& cell) { return host_reference_shape(cell).rows(); }

LogitsCheck check_against_host(const CellParams& cell, const WeightLayout& layout,
                               std::span<const std::int32_t> tokens, std::span<const float> logits,
                               const std::optional<ReferenceLogits>& kept) {
    const auto vocab = static_cast<std::size_t>(cell.model.vocab_size);
    const HostReferencePart part = host_reference_part(cell, tokens);
    const BatchShape& shape = part.shape;
    const std::optional<std::string> key = key_of(cell, part);

    std::vector<float> ref;
    double reference_seconds = 0;
    const bool reused = key && kept && kept->key == *key;
    if (reused) {
        ref = kept->logits;
    } else {
        const auto start = std::chrono::steady_clock::now();
        CellUnits weights(cell, layout);
        CpuForward forward(cell.model, layout, shape, cell.dropout_masks());
        ref.resize(part.tokens.size() * vocab);
        forward.run(weights, part.tokens, ref);
        reference_seconds = seconds_since(start);
    }

    // The shape's rows are the cell's first rows (all of them, or sequence 0's first positions);
    // padding rows are compared with nothing: no sequence reads them.
    ErrorMeasure error;
    for (std::int64_t row = 0; row < shape.rows(); ++row) {
        if (!shape.is_real(row)) continue;
        const std::size_t first = static_cast<std::size_t>(row) * vocab;
        for (std::size_t i = first; i < first + vocab; ++i) error.add(logits[i], ref[i]);
    }
    LogitsCheck check;
    check.reference = part.full ? "host fp32 forward"
                                : "host fp32 forward, sample 0, first " + std::to_string(shape.stride()) + " positions";
    check.tolerance = gpu_tolerance(cell.dtype, cell.tf32);
    check.max_abs_err = error.max_abs_err();
    check.rel_err = error.rel_err();
    check.reference_computed = !reused;
    check.reference_seconds = reference_seconds;
    if (key)
        check.kept =
            ReferenceLogits{*key, cell.model.name, shape.batch(), shape.stride(), cell.model.vocab_size, std::move(ref)};
    return check;
}

std::optional<LogitsCheck> check_against_float64(const CellParams& cell, const WeightLayout& layout, LayerSource& weights,
                                                 const BatchShape& shape, std::span<const std::int32_t> tokens,
                                                 std::span<const float> logits) {
    if (reference_forward_macs(cell.model, shape) > kMaxFloat64Macs) return std::nullopt;
    std::vector<const float*> units;
    for (std::size_t i = 0; i < layout.units.size(); ++i)
        units.push_back(static_cast<const float*>(weights.acquire(static_cast<int>(i))));
    const auto ref = reference_forward(cell.model, layout, units, tokens, shape, cell.dropout_masks());
    for (std::size_t i = 0; i < layout.units.size(); ++i) weights.release(static_cast<int>(i));

    // A padding row's logits are whatever the forward computed there: no sequence reads them.
    const auto vocab = static_cast<std::size_t>(cell.model.vocab_size);
    ErrorMeasure error;
    for (std::int64_t row = 0; row < shape.rows(); ++row) {
        if (!shape.is_real(row)) continue;
        const std::size_t first = static_cast<std::size_t>(row) * vocab;
        for (std::size_t i = first; i < first + vocab; ++i) error.add(logits[i], ref[i]);
    }
    LogitsCheck check;
    check.reference = "float64 loops";
    check.tolerance = kHostFp32Tolerance;
    check.max_abs_err = error.max_abs_err();
    check.rel_err = error.rel_err();
    return check;
}

void judge_output(const OutputCount& output, const std::optional<LogitsCheck>& check, CellOutcome& out) {
    if (check) {
        out.set<"check_reference">(check->reference);
        out.set<"check_max_abs_err">(check->max_abs_err);
        out.set<"check_rel_err">(check->rel_err);
        out.set<"check_tolerance">(check->tolerance);
        out.set<"check_reference_computed">(check->reference_computed);
        out.reference = check->kept;
    }
    if (output.nonfinite > 0) {
        out.status = CellStatus::failed;
        out.reason = "the output has " + std::to_string(output.nonfinite) + " non-finite values (NaN or infinity) among its " +
                     std::to_string(output.total) + " " + output.what;
    } else if (check && !check->passed()) {
        out.status = CellStatus::invalid;
        out.reason = check->compared + " differ from the " + check->reference + ": relative error " + format_number(check->rel_err) +
                     " > tolerance " + format_number(check->tolerance);
    } else {
        out.status = CellStatus::ok;
        out.reason.clear();
    }
}

}  // namespace sweetspot
