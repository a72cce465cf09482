#pragma once
// Where a model's weights live and how they reach the compute. One interface; each backend
// (device, explicit-copy, uvm, uvm-prefetch, host) implements it in its own file.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kernels/dtype.hpp"
#include "kernels/layer_source.hpp"
#include "kernels/weight_layout.hpp"

namespace sweetspot {

struct BackendConfig {
    std::string name = "host";
    DType dtype = DType::fp32;
    int streams = 1;
    int prefetch_depth = 0;          // 0: off, -1: just in time, n: look-ahead in layers
    std::int64_t budget_bytes = 0;   // device bytes the weights may occupy
    bool managed_activations = false;
};

class Backend : public LayerSource {
public:
    // Writes unit `unit`'s fp32 weights into `dst` (unit.numel elements).
    using UnitFiller = std::function<void(int unit, std::span<float> dst)>;

    virtual std::string_view name() const = 0;
    // Allocates storage for every unit and fills it once through `fill`.
    virtual void place(const WeightLayout& layout, const UnitFiller& fill) = 0;
    // Puts the weights back in the cell's starting state before an iteration.
    virtual void reset_residency() = 0;
};

// Empty when backend `name` can run in this build and on this machine; otherwise why not.
std::string backend_unavailable_reason(std::string_view name);
// Throws std::runtime_error when the backend is unavailable.
std::unique_ptr<Backend> make_backend(const BackendConfig& config);

}  // namespace sweetspot
