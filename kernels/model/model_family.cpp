#include "kernels/model/model_family.hpp"

#include <stdexcept>

#include "kernels/model/gpt2/gpt2_family.hpp"
#include "kernels/model/llama/llama_family.hpp"

namespace sweetspot {

const FamilyDecl& family_of(ModelFamily family) {
    switch (family) {
        case ModelFamily::gpt2: return gpt2::family();
        case ModelFamily::llama: return llama::family();
    }
    throw std::logic_error("family_of: unknown model family");
}

std::optional<ModelFamily> family_of_model_type(std::string_view model_type) {
    for (const auto& family : EnumNames<ModelFamily>::list)
        for (const std::string_view type : family_of(family.value).model_types)
            if (type == model_type) return family.value;
    return std::nullopt;
}

std::vector<std::string> known_model_types() {
    std::vector<std::string> types;
    for (const auto& family : EnumNames<ModelFamily>::list)
        for (const std::string_view type : family_of(family.value).model_types) types.emplace_back(type);
    return types;
}

}  // namespace sweetspot
