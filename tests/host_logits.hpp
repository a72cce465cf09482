#pragma once
// Host-forward logits of a cell's synthetic weights, for the tests of the logits check: what a
// GPU cell of a dtype is compared with.
#include <cstdint>
#include <span>
#include <vector>

#include "harness/matrix/cell.hpp"
#include "kernels/compute/cpu_forward.hpp"
#include "kernels/model/batch_shape.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/layer_source.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot::test {

// The logits [rows, vocab] of `tokens` (one per row of `shape`) on `cell`'s synthetic weights
// rounded to `rounded_to`.
inline std::vector<float> host_logits(const CellParams& cell, const WeightLayout& layout, DType rounded_to,
                                      const BatchShape& shape, std::span<const std::int32_t> tokens) {
    std::vector<std::vector<float>> units;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        auto& w = units.emplace_back(static_cast<std::size_t>(layout.units[u].numel));
        fill_synthetic_unit(cell.model, layout, static_cast<int>(u), cell.seed, w);
        round_through_dtype(w, rounded_to);
    }
    struct Source : LayerSource {
        std::vector<std::vector<float>>* units;
        const void* acquire(int u) override { return (*units)[static_cast<std::size_t>(u)].data(); }
        void release(int) override {}
    } source;
    source.units = &units;
    CpuForward forward(cell.model, layout, shape);
    std::vector<float> logits(static_cast<std::size_t>(shape.rows()) * static_cast<std::size_t>(cell.model.vocab_size));
    forward.run(source, tokens, logits);
    return logits;
}

}  // namespace sweetspot::test
