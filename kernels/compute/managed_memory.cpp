#include "kernels/compute/managed_memory.hpp"

#include "base/number_text.hpp"

#ifdef SWEETSPOT_HAVE_CUDA
#include "kernels/compute/cuda_check.hpp"
#endif

namespace sweetspot {

std::string managed_refusal(std::int64_t request_bytes, std::int64_t free_bytes, bool allow_oversubscription) {
    if (allow_oversubscription || request_bytes + kManagedMarginBytes <= free_bytes) return {};
    return "refusing to allocate " + human_bytes(static_cast<double>(request_bytes)) + " of managed memory: the GPU has " + human_bytes(static_cast<double>(free_bytes)) +
           " free and sweetspot keeps a margin of " + human_bytes(static_cast<double>(kManagedMarginBytes)) +
           " (oversubscribed managed memory can hang a shared GPU). Study oversubscription with the `budget` axis, "
           "or pass --allow-oversubscription on a machine that is yours alone";
}

#ifdef SWEETSPOT_HAVE_CUDA
void check_managed_request(std::int64_t bytes, bool allow_oversubscription) {
    std::size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (auto why = managed_refusal(bytes, static_cast<std::int64_t>(free_bytes), allow_oversubscription); !why.empty())
        throw ManagedMemoryRefused(why);
}

void* allocate_managed(std::int64_t bytes, bool allow_oversubscription) {
    check_managed_request(bytes, allow_oversubscription);
    void* p = nullptr;
    CUDA_CHECK(cudaMallocManaged(&p, static_cast<std::size_t>(bytes), cudaMemAttachGlobal));
    return p;
}
#endif

}  // namespace sweetspot
