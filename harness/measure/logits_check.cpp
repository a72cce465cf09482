#include "harness/measure/logits_check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "harness/measure/cell_weights.hpp"
#include "kernels/compute/cpu_forward.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/compute/reference_forward.hpp"

namespace sweetspot {
namespace {

// Above this many flops the host recomputes a prefix only (a few seconds on a 16-core host).
constexpr double kFullCheckFlops = 4e11;
constexpr int kPrefixPositions = 16;

// The float64 reference runs as plain loops; above this many multiply-adds it would take
// longer than the measurement itself, and the cell is stored as not checked.
constexpr double kMaxFloat64Macs = 2e9;

// Relative error (max |out - ref| / max |ref|) allowed for fp32 host output against float64.
constexpr double kHostFp32Tolerance = 1e-4;

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

LogitsCheck check_against_host(const CellParams& cell, const WeightLayout& layout,
                               std::span<const std::int32_t> tokens, std::span<const float> logits) {
    const auto vocab = static_cast<std::size_t>(cell.model.vocab_size);
    const double flops = 2.0 * static_cast<double>(cell.model.n_params()) * cell.batch * cell.seq;
    const bool full = flops <= kFullCheckFlops;
    const int batch = full ? cell.batch : 1;
    const int seq = full ? cell.seq : std::min(cell.seq, kPrefixPositions);

    std::vector<std::int32_t> ref_tokens;
    for (int b = 0; b < batch; ++b)
        for (int t = 0; t < seq; ++t) ref_tokens.push_back(tokens[static_cast<std::size_t>(b * cell.seq + t)]);
    CellUnits weights(cell, layout);
    CpuForward forward(cell.model, layout, batch, seq, cell.dropout_masks());
    std::vector<float> ref(ref_tokens.size() * vocab);
    forward.run(weights, ref_tokens, ref);

    ErrorMeasure error;
    for (int b = 0; b < batch; ++b) {
        for (int t = 0; t < seq; ++t) {
            const float* out = logits.data() + (static_cast<std::size_t>(b) * cell.seq + t) * vocab;
            const float* r = ref.data() + (static_cast<std::size_t>(b) * seq + t) * vocab;
            for (std::size_t v = 0; v < vocab; ++v) error.add(out[v], r[v]);
        }
    }
    LogitsCheck check;
    check.reference = full ? "host fp32 forward" : "host fp32 forward, sample 0, first " + std::to_string(seq) + " positions";
    check.tolerance = gpu_tolerance(cell.dtype, cell.tf32);
    check.max_abs_err = error.max_abs_err();
    check.rel_err = error.rel_err();
    return check;
}

std::optional<LogitsCheck> check_against_float64(const CellParams& cell, const WeightLayout& layout, LayerSource& weights,
                                                 std::span<const std::int32_t> tokens, std::span<const float> logits) {
    if (reference_forward_macs(cell.model, cell.batch, cell.seq) > kMaxFloat64Macs) return std::nullopt;
    std::vector<const float*> units;
    for (std::size_t i = 0; i < layout.units.size(); ++i)
        units.push_back(static_cast<const float*>(weights.acquire(static_cast<int>(i))));
    const auto ref = reference_forward(cell.model, layout, units, tokens, cell.batch, cell.seq, cell.dropout_masks());
    for (std::size_t i = 0; i < layout.units.size(); ++i) weights.release(static_cast<int>(i));

    ErrorMeasure error;
    for (std::size_t i = 0; i < ref.size(); ++i) error.add(logits[i], ref[i]);
    LogitsCheck check;
    check.reference = "float64 loops";
    check.tolerance = kHostFp32Tolerance;
    check.max_abs_err = error.max_abs_err();
    check.rel_err = error.rel_err();
    return check;
}

void judge_output(std::span<const float> logits, const std::optional<LogitsCheck>& check, CellOutcome& out) {
    if (check) {
        out.check_reference = check->reference;
        out.check_max_abs_err = check->max_abs_err;
        out.check_rel_err = check->rel_err;
        out.check_tolerance = check->tolerance;
    }
    if (const std::size_t bad = count_nonfinite(logits); bad > 0) {
        out.status = CellStatus::failed;
        out.reason = "the output has " + std::to_string(bad) + " non-finite values (NaN or infinity) among its " +
                     std::to_string(logits.size()) + " logits";
    } else if (check && !check->passed()) {
        out.status = CellStatus::invalid;
        out.reason = "logits differ from the " + check->reference + ": relative error " + format_number(check->rel_err) +
                     " > tolerance " + format_number(check->tolerance);
    } else {
        out.status = CellStatus::ok;
        out.reason.clear();
    }
}

}  // namespace sweetspot
