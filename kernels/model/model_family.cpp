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

}  // namespace sweetspot
