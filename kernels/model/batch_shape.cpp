#include "kernels/model/batch_shape.hpp"

#include <stdexcept>
#include <string>

namespace sweetspot {

void check_batch_shape(std::string_view who, const ModelConfig& model, const WeightLayout& layout, int batch, int seq) {
    if (const auto why = model.validate(); !why.empty()) throw std::invalid_argument(why);
    const std::string name(who);
    require_layout_for(model, layout, name);
    if (batch < 1) throw std::invalid_argument(name + ": batch must be at least 1, got " + std::to_string(batch) + ".");
    if (seq < 1 || seq > model.max_positions) {
        throw std::invalid_argument(name + ": seq must be between 1 and " + std::to_string(model.max_positions) +
                                    " (the max_positions of model '" + model.name + "'), got " + std::to_string(seq) +
                                    ".");
    }
}

void check_batch_ids(std::string_view who, const ModelConfig& model, std::span<const std::int32_t> ids,
                     std::int64_t expected, std::string_view what) {
    const std::string name(who), kind(what);
    if (static_cast<std::int64_t>(ids.size()) != expected) {
        throw std::invalid_argument(name + ": expected " + std::to_string(expected) + " " + kind +
                                    " ids (batch × seq), got " + std::to_string(ids.size()) + ".");
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= model.vocab_size) {
            throw std::invalid_argument(name + ": " + kind + " " + std::to_string(ids[i]) + " at index " +
                                        std::to_string(i) + " is outside the vocabulary of model '" + model.name +
                                        "' (" + std::to_string(model.vocab_size) + " tokens).");
        }
    }
}

}  // namespace sweetspot
