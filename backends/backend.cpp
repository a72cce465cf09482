#include "backends/backend.hpp"

#include <stdexcept>

#include "backends/backend_registry.hpp"
#include "backends/host_backend.hpp"

#ifdef SWEETSPOT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backends/device_backend.hpp"
#include "backends/explicit_copy_backend.hpp"
#include "backends/uvm_backend.hpp"
#include "backends/uvm_prefetch_backend.hpp"
#endif

namespace sweetspot {
namespace {

// Empty when a GPU is usable, otherwise why not.
std::string gpu_unavailable_reason() {
#ifdef SWEETSPOT_HAVE_CUDA
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        (void)cudaGetLastError();  // not sticky, but leave no error behind for the next call
        return std::string("no GPU visible: ") + cudaGetErrorString(status);
    }
    if (count == 0) return std::string("no GPU visible: ") + cudaGetErrorString(cudaErrorNoDevice);
    return {};
#else
    return "built without CUDA";
#endif
}

void check_config(const BackendConfig& config) {
    const std::string name(enum_name(config.backend));
    if (config.streams < 0)
        throw std::invalid_argument("backend '" + name + "': streams must be >= 0, got " + std::to_string(config.streams));
    if (config.prefetch_depth < -1) {
        throw std::invalid_argument("backend '" + name + "': prefetch depth must be -1 (jit), 0 (off) or a look-ahead >= 1, got " +
                                    std::to_string(config.prefetch_depth));
    }
}

}  // namespace

std::string backend_unavailable_reason(BackendId backend) {
    if (!backend_traits(backend).needs_gpu) return {};
    if (auto why = gpu_unavailable_reason(); !why.empty())
        return "backend '" + std::string(enum_name(backend)) + "' needs a GPU: " + why;
    return {};
}

std::unique_ptr<Backend> make_backend(const BackendConfig& config) {
    if (auto why = backend_unavailable_reason(config.backend); !why.empty()) throw std::runtime_error(why);
    check_config(config);
    switch (config.backend) {
        case BackendId::host: return std::make_unique<HostBackend>();
#ifdef SWEETSPOT_HAVE_CUDA
        case BackendId::device: return std::make_unique<DeviceBackend>(config);
        case BackendId::explicit_copy: return std::make_unique<ExplicitCopyBackend>(config);
        case BackendId::uvm: return std::make_unique<UvmBackend>(config);
        case BackendId::uvm_prefetch: return std::make_unique<UvmPrefetchBackend>(config);
#else
        default: break;
#endif
    }
    throw std::logic_error("make_backend: backend '" + std::string(enum_name(config.backend)) +
                           "' is available but not constructed");
}

}  // namespace sweetspot
