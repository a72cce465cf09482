#include "harness/measure/cell_weights.hpp"

#include <memory>
#include <set>
#include <utility>

#include "kernels/model/checkpoint_error.hpp"
#include "kernels/model/checkpoint_weights.hpp"
#include "kernels/model/synthetic_weights.hpp"

namespace sweetspot {

Backend::UnitFiller make_unit_filler(const CellParams& cell, const WeightLayout& layout) {
    require_layout_for(cell.model, layout, "make_unit_filler");
    if (cell.weights == kSyntheticWeights) {
        return [model = cell.model, layout, seed = cell.seed](int unit, std::span<float> dst) {
            fill_synthetic_unit(model, layout, unit, seed, dst);
        };
    }
    // Shared, because std::function copies its target and the mapping must outlive every copy.
    auto checkpoint = std::make_shared<const Gpt2Checkpoint>(Gpt2Checkpoint::open(cell.weights, cell.model));
    return [checkpoint = std::move(checkpoint)](int unit, std::span<float> dst) { checkpoint->fill_unit(unit, dst); };
}

void require_loadable_weights(const std::vector<CellParams>& cells) {
    // Model names are unique within a matrix, so (weights, model name) identifies what to check.
    std::set<std::pair<std::string, std::string>> checked;
    for (std::size_t i = 0; i < cells.size(); ++i) {
        const CellParams& c = cells[i];
        if (c.weights == kSyntheticWeights || !checked.emplace(c.weights, c.model.name).second) continue;
        try {
            Gpt2Checkpoint::open(c.weights, c.model);
        } catch (const CheckpointError& e) {
            throw CheckpointError("cell " + std::to_string(i) + " (" + c.label() + ", weights = \"" + c.weights +
                                  "\"): " + e.what());
        }
    }
}

}  // namespace sweetspot
