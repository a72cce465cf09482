#include "kernels/compute/family_compute.hpp"

#include <stdexcept>
#include <string>

#include "kernels/compute/gpt2/gpt2_compute.hpp"
#include "kernels/compute/llama/llama_compute.hpp"
#include "kernels/model/model_family.hpp"

namespace sweetspot {

const FamilyCompute& compute_of(ModelFamily family) {
    switch (family) {
        case ModelFamily::gpt2: return gpt2::compute();
        case ModelFamily::llama: return llama::compute();
    }
    throw std::logic_error("compute_of: unknown model family");
}

void check_dropout(std::string_view who, const ModelConfig& model, const BatchShape& shape, const Dropout& dropout) {
    if (!dropout.active()) return;
    if (!compute_of(model.family).dropout)
        throw std::invalid_argument(std::string(who) + ": model '" + model.name + "' is of the " +
                                    std::string(family_of(model).title) + " family, which has no dropout.");
    if (!shape.is_rectangular())
        throw std::invalid_argument(std::string(who) + ": dropout needs a rectangular batch (its masks are numbered by "
                                    "sequence and position in rows of one length); this batch is ragged.");
}

}  // namespace sweetspot
