#pragma once
// What each backend is and can do, declared once. The harness asks this registry (which names
// exist, which need a GPU, which dtypes they compute in, whether a configuration can be
// honoured) and never spells a backend's name itself.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backends/backend.hpp"

namespace sweetspot {

struct BackendTraits {
    BackendId id;
    // Places weights for the GPU forward (with its fused variants and managed activations); the
    // others feed the CPU forward, which has neither.
    bool needs_gpu = true;
    // Runs with a budget below the weights, streaming or evicting units (its streams, prefetch
    // and budget then shape the measurement).
    bool runs_under_budget = false;
    std::vector<DType> dtypes;
    // Why this backend cannot honour `config` for units of these sizes (in the config's dtype),
    // decided on the CPU without touching a GPU; empty when it can.
    std::function<std::string(const BackendConfig& config, std::span<const std::int64_t> unit_bytes)> cannot_honour;

    bool computes_in(DType dtype) const;
};

// Every backend, in the order of BackendId.
const std::vector<BackendTraits>& backend_registry();
const BackendTraits& backend_traits(BackendId backend);

}  // namespace sweetspot
