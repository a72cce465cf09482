#include "harness/logits_check.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "harness/cell_weights.hpp"
#include "kernels/cpu_forward.hpp"
#include "kernels/dtype.hpp"

namespace sweetspot {
namespace {

// Above this many flops the host recomputes a prefix only (a few seconds on a 16-core host).
constexpr double kFullCheckFlops = 4e11;
constexpr int kPrefixPositions = 16;

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
    CpuForward forward(cell.model, layout, batch, seq);
    std::vector<float> ref(ref_tokens.size() * vocab);
    forward.run(weights, ref_tokens, ref);

    LogitsCheck check;
    check.reference = full ? "host fp32 forward" : "host fp32 forward, sample 0, first " + std::to_string(seq) + " positions";
    check.tolerance = gpu_tolerance(cell.dtype, cell.tf32);
    double max_ref = 0;
    for (int b = 0; b < batch; ++b) {
        for (int t = 0; t < seq; ++t) {
            const float* out = logits.data() + (static_cast<std::size_t>(b) * cell.seq + t) * vocab;
            const float* r = ref.data() + (static_cast<std::size_t>(b) * seq + t) * vocab;
            for (std::size_t v = 0; v < vocab; ++v) {
                const double diff = std::abs(static_cast<double>(out[v]) - r[v]);
                // NaN compares false with everything: make it the error instead of skipping it.
                check.max_abs_err = std::isnan(diff) ? diff : std::max(check.max_abs_err, diff);
                max_ref = std::max(max_ref, std::abs(static_cast<double>(r[v])));
            }
        }
    }
    check.rel_err = max_ref > 0 ? check.max_abs_err / max_ref : check.max_abs_err;
    return check;
}

}  // namespace sweetspot
