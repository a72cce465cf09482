#pragma once
// What a sweep records about itself before its first cell: the GPU and its host link, probed
// where the matrix has GPU cells (with the rates printed), and the run's row.
#include <optional>
#include <ostream>

#include "harness/matrix/matrix.hpp"
#include "harness/measure/gpu_probe.hpp"
#include "harness/runner/runner.hpp"

namespace sweetspot {

// The GPU facts of this machine where some cell needs a GPU (probed in a child process, and
// printed to `out`); none otherwise.
GpuFacts probe_for_sweep(const Matrix& matrix, std::ostream& out);

// The host's memory bandwidth (GB/s, printed to `out`) where some GPU training cell updates on the
// host's cores (optimizer = "host"), whose bound it is a term of; none otherwise.
std::optional<double> host_memory_for_sweep(const Matrix& matrix, std::ostream& out);

// The run's row: the machine, the GPU, the matrix and the command.
RunInfo run_info(const Matrix& matrix, const RunOptions& options, const GpuFacts& gpu,
                 std::optional<double> host_memory_gbps);

}  // namespace sweetspot
