#include "harness/measure/memory_estimate.hpp"

#include <stdexcept>

#include "backends/backend_registry.hpp"
#include "backends/residency_plan.hpp"
#include "harness/measure/cell_exec.hpp"
#include "kernels/compute/gemm_workspace.hpp"
#include "kernels/model/activation_layout.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

MemoryEstimate estimate_memory(const CellParams& cell) {
    const BackendTraits& backend = backend_traits(cell.backend);
    const BackendConfig config = backend_config(cell);
    const auto units = unit_bytes(WeightLayout::for_model(cell.model), cell.dtype);
    if (const std::string why = backend.cannot_honour(config, units); !why.empty()) throw std::invalid_argument(why);

    MemoryEstimate e;
    const WeightFootprint weights = backend.footprint(config, units);
    e.weights = weights.device_bytes;
    e.pinned_host = weights.pinned_host_bytes;
    e.managed = weights.managed_bytes;
    if (!backend.needs_gpu) return e;

    const ActivationLayout layout = activation_layout(cell.model, cell.dtype, cell.batch, cell.seq,
                                                      !cell.variant.has(Fusion::flash_attention));
    e.scores = layout.scores_bytes;
    e.activations = layout.total_bytes - layout.scores_bytes;
    e.workspace = kGemmWorkspaceBytes;
    e.managed_activations = cell.activations == Activations::managed;
    if (e.managed_activations) e.managed += layout.total_bytes;
    return e;
}

}  // namespace sweetspot
