#include "kernels/compute/family_compute.hpp"

#include <stdexcept>

#include "kernels/compute/gpt2/gpt2_compute.hpp"
#include "kernels/compute/llama/llama_compute.hpp"

namespace sweetspot {

const FamilyCompute& compute_of(ModelFamily family) {
    switch (family) {
        case ModelFamily::gpt2: return gpt2::compute();
        case ModelFamily::llama: return llama::compute();
    }
    throw std::logic_error("compute_of: unknown model family");
}

}  // namespace sweetspot
