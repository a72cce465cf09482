#include "harness/runner/run_metadata.hpp"

#include <algorithm>

#include "base/number_text.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/system/memory_bandwidth.hpp"
#include "harness/system/system_info.hpp"

namespace sweetspot {

GpuFacts probe_for_sweep(const Matrix& matrix, std::ostream& out) {
    if (std::none_of(matrix.cells.begin(), matrix.cells.end(), uses_gpu)) return {};
    out << "sweetspot: probing the GPU and the host link (pinned 1 GiB copies)\n";
    GpuFacts gpu = probe_gpu_in_child(true);
    if (gpu.h2d_gbps)
        out << "sweetspot: " << gpu.name.value_or("GPU") << ", pinned host->device " << fixed(*gpu.h2d_gbps, 1)
            << " GB/s, device->host " << fixed(gpu.d2h_gbps.value_or(0), 1) << " GB/s\n";
    else
        out << "sweetspot: no GPU measurement (" << gpu.note << "); GPU cells will be skipped\n";
    if (!gpu.managed_rates.empty()) {
        out << "sweetspot: managed memory (" << human_bytes(gpu.managed_rates.front().bytes) << " range):";
        for (const ManagedRate& m : gpu.managed_rates)
            out << " " << m.operation << " " << fixed(m.gbps, 1) << " GB/s (host " << fixed(m.host_ms, 2) << " ms)";
        out << "\n";
    }
    if (gpu.h2d_gbps && !gpu.note.empty()) out << "sweetspot: " << gpu.note << "\n";
    return gpu;
}

HostMemoryProbeSizes HostMemoryProbeSizes::within(std::optional<std::int64_t> available) const {
    if (!available) return *this;
    const std::int64_t quarter = *available / 4;
    // The triad's three float arrays; the update's bf16 gradient and weights, fp32 master, m and v.
    return {std::clamp<std::int64_t>(quarter / (3 * 4), 1, triad_floats),
            std::clamp<std::int64_t>(quarter / (2 + 2 + 3 * 4), 1, update_elements)};
}

std::optional<HostMemoryRates> host_memory_for_sweep(const Matrix& matrix, std::ostream& out,
                                                     const HostMemoryProbeSizes& sizes) {
    const auto updates_on_host = [](const CellParams& c) {
        return c.mode == Mode::train && c.optimizer == StateHome::host && uses_gpu(c);
    };
    if (std::none_of(matrix.cells.begin(), matrix.cells.end(), updates_on_host)) return std::nullopt;
    const HostMemoryProbeSizes fit = sizes.within(host_memory_available_bytes());
    const MemoryBandwidth triad = measure_host_memory_bandwidth(fit.triad_floats);
    const MemoryBandwidth update = measure_host_update_bandwidth(fit.update_elements);
    out << "sweetspot: host memory " << fixed(triad.gbps, 1) << " GB/s (STREAM triad over 3 × "
        << human_bytes(static_cast<double>(triad.bytes / 3)) << ", best of " << triad.passes << " passes); "
        << fixed(update.gbps, 1) << " GB/s moved by the host update's own streams (over "
        << human_bytes(static_cast<double>(update.bytes / 30 * 16)) << ", best of " << update.passes
        << " passes): the bound of the cells whose optimizer runs on the host\n";
    return HostMemoryRates{triad.gbps, update.gbps};
}

RunInfo run_info(const Matrix& matrix, const RunOptions& options, const GpuFacts& gpu,
                 const std::optional<HostMemoryRates>& host_memory) {
    RunInfo info = host_run_info();
    if (host_memory) {
        info.host_memory_gbps = host_memory->triad_gbps;
        info.host_update_gbps = host_memory->update_gbps;
    }
    info.gpu_name = gpu.name;
    info.gpu_driver = gpu.driver;
    info.cuda_runtime = gpu.runtime;
    info.gpu_memory_bytes = gpu.memory_bytes;
    info.h2d_gbps = gpu.h2d_gbps;
    info.d2h_gbps = gpu.d2h_gbps;
    info.managed = gpu.managed;
    info.managed_rates = gpu.managed_rates;
    info.command_line = options.command_line;
    info.matrix_path = matrix.path;
    info.matrix_name = matrix.name;
    info.matrix_hash = matrix.hash();
    info.matrix_text = matrix.text;
    info.cells_total = static_cast<int>(matrix.cells.size());
    return info;
}

}  // namespace sweetspot
