#include "harness/measure/memory_estimate.hpp"

#include <stdexcept>

#include "backends/backend_registry.hpp"
#include "backends/residency_plan.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/store/store.hpp"
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

std::vector<FixedCost> measured_fixed_costs(const std::string& path) {
    std::string own_memory;  // the GPU backends whose device memory is all their own allocations
    for (const BackendTraits& b : backend_registry())
        if (b.needs_gpu && !b.managed_weights) own_memory += (own_memory.empty() ? "'" : ", '") + std::string(enum_name(b.id)) + "'";
    Store store = Store::open_read_only(path);
    auto st = store.db().prepare(
        "SELECT coalesce(r.gpu_name, ''), coalesce(r.gpu_driver, ''),"
        " max(c.device_used_bytes - c.device_weight_bytes - c.activation_bytes),"
        " min(c.device_used_bytes - c.device_weight_bytes - c.activation_bytes), count(*)"
        " FROM cells c JOIN runs r USING (run_id)"
        " WHERE c.status = 'ok' AND c.backend IN (" + own_memory + ") AND c.device_used_bytes IS NOT NULL"
        " AND c.device_weight_bytes IS NOT NULL AND c.activation_bytes IS NOT NULL"
        " GROUP BY 1, 2 ORDER BY 1, 2");
    std::vector<FixedCost> costs;
    while (st.step())
        costs.push_back({st.text(0), st.text(1), st.int64(2), st.int64(3), static_cast<int>(st.int64(4))});
    return costs;
}

}  // namespace sweetspot
