#pragma once
// The GPU ops' timings that bench_kernels --db writes (the kernel_timings table): each op entry's
// timed runs in one dtype and shape, with the op's cost, so that `sweetspot compare` sets two
// databases' kernels side by side.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/store/sqlite.hpp"

namespace sweetspot {

struct KernelTiming {
    std::string op, dtype, shape;  // "layernorm_backward", "bf16", "rows 8192 c 1600"
    double flops = 0, bytes = 0;   // one run's model flops (0: memory-bound) and least traffic
    std::vector<double> ms;        // the timed runs, in order
};

// Writes `timing` as rows of run `run_id` (inside the caller's transaction, if any).
void insert_kernel_timing(Database& db, std::int64_t run_id, const KernelTiming& timing);

// The timings of the runs `run_id` names (every run when nullopt) that ran the matrix `matrix`
// (any when nullopt), one per (op, dtype, shape) in the order first written, the runs of one
// pooled; none in a database from before kernel_timings (schema 17).
std::vector<KernelTiming> read_kernel_timings(Database& db, std::optional<std::int64_t> run_id,
                                              const std::optional<std::string>& matrix);

}  // namespace sweetspot
