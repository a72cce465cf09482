#include "backends/backend.hpp"

#include <stdexcept>

#include "backends/host_backend.hpp"

namespace sweetspot {

std::string backend_unavailable_reason(std::string_view name) {
    if (name == "host") return {};
    if (name == "device" || name == "explicit-copy" || name == "uvm" || name == "uvm-prefetch")
        return "backend '" + std::string(name) + "' is not implemented in this version of sweetspot";
    return "unknown backend '" + std::string(name) + "'";
}

std::unique_ptr<Backend> make_backend(const BackendConfig& config) {
    if (auto why = backend_unavailable_reason(config.name); !why.empty()) throw std::runtime_error(why);
    return std::make_unique<HostBackend>();
}

}  // namespace sweetspot
