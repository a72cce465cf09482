#pragma once
// The one door to cudaMallocManaged. On a shared GPU a managed allocation larger than the free
// device memory can hang the whole device, so every request is checked against cudaMemGetInfo
// first and refused with an explanation unless the user explicitly allowed oversubscription.
#include <cstdint>
#include <stdexcept>
#include <string>

namespace sweetspot {

// Device memory kept free beyond a managed request (CUDA context growth, cuBLAS, fragmentation).
inline constexpr std::int64_t kManagedMarginBytes = std::int64_t{1} << 30;

// Why a managed request of `request_bytes` must be refused when `free_bytes` of device memory
// are free (empty when it may go ahead). Pure, so the rule is tested without a GPU.
std::string managed_refusal(std::int64_t request_bytes, std::int64_t free_bytes, bool allow_oversubscription);

class ManagedMemoryRefused : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

#ifdef SWEETSPOT_HAVE_CUDA
// Checks `bytes` against the device's free memory now; throws ManagedMemoryRefused.
void check_managed_request(std::int64_t bytes, bool allow_oversubscription);
// check_managed_request, then cudaMallocManaged (cudaMemAttachGlobal).
void* allocate_managed(std::int64_t bytes, bool allow_oversubscription);
#endif

}  // namespace sweetspot
