#pragma once
// What a sweep records about itself before its first cell: the GPU and its host link, probed
// where the matrix has GPU cells (with the rates printed), and the run's row.
#include <optional>
#include <ostream>

#include "harness/matrix/matrix.hpp"
#include "harness/measure/gpu_probe.hpp"
#include "harness/runner/runner.hpp"
#include "harness/system/memory_bandwidth.hpp"

namespace sweetspot {

// The GPU facts of this machine where some cell needs a GPU (probed in a child process, and
// printed to `out`); none otherwise.
GpuFacts probe_for_sweep(const Matrix& matrix, std::ostream& out);

// The host's memory bandwidth, both ways harness/system/memory_bandwidth.hpp measures it (GB/s,
// printed to `out`), where some GPU training cell updates on the host's cores (optimizer =
// "host"), whose bound the update's rate is a term of; none otherwise. `sizes`: the probes'
// arrays, smaller than a sweep's in a test.
struct HostMemoryRates {
    double triad_gbps = 0, update_gbps = 0;
};
struct HostMemoryProbeSizes {
    std::int64_t triad_floats = kTriadFloats, update_elements = kUpdateElements;
    // These, each probe's arrays shrunk where needed to a quarter of `available` bytes (as they are
    // where the host does not say), so that measuring never pushes a small host into swap.
    HostMemoryProbeSizes within(std::optional<std::int64_t> available) const;
};
std::optional<HostMemoryRates> host_memory_for_sweep(const Matrix& matrix, std::ostream& out,
                                                     const HostMemoryProbeSizes& sizes = {});

// The run's row: the machine, the GPU, the matrix and the command.
RunInfo run_info(const Matrix& matrix, const RunOptions& options, const GpuFacts& gpu,
                 const std::optional<HostMemoryRates>& host_memory);

}  // namespace sweetspot
