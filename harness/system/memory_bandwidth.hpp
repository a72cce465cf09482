#pragma once
// The host's memory bandwidth, measured as STREAM's triad measures it: a[i] = b[i] + s·c[i] over
// three float arrays far larger than the caches, split over every core as the host's AdamW splits
// its pass (base/parallel_for.hpp), so the rate is one that update can reach. It bounds an update
// made on the host's cores (optimizer = "host": host_adamw streams the master weights, moments,
// gradient and weights once each), so a training cell's bound has a term for it (analysis/bound.py).
#include <cstdint>

namespace sweetspot {

struct TriadBandwidth {
    double gbps = 0;        // of the fastest timed pass (STREAM's best rate), 1e9 bytes a second
    std::int64_t bytes = 0;  // counted per pass: 3 arrays × n floats (two read, one written), as STREAM counts
    int passes = 0;          // timed, after one untimed pass
};

// `floats` elements per array (default 64 Mi: 3 × 256 MiB); `passes` ≥ 1 timed passes.
// Throws std::invalid_argument for fewer than one element or pass.
TriadBandwidth measure_host_memory_bandwidth(std::int64_t floats = std::int64_t{64} << 20, int passes = 5);

}  // namespace sweetspot
