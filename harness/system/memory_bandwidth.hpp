#pragma once
// The host's memory bandwidth, measured over every core as the host's AdamW splits its pass
// (base/parallel_for.hpp), so the rates are ones that update can reach, in two ways:
// - STREAM's triad, a[i] = b[i] + s·c[i] over three float arrays far larger than the caches: the
//   figure every machine is compared by;
// - the host update's own streams (host_adamw's loads and stores, without its arithmetic): where
//   the cores, not the memory, set the rate, a pass of nine streams moves more than the triad's
//   three do, and the update itself beats the triad's rate. This one bounds an update made on the
//   host's cores (optimizer = "host"), a term of a training cell's bound (analysis/bound.py).
#include <cstdint>

namespace sweetspot {

struct MemoryBandwidth {
    double gbps = 0;         // of the fastest timed pass (STREAM's best rate), 1e9 bytes a second
    std::int64_t bytes = 0;  // counted per pass (below)
    int passes = 0;          // timed, after one untimed pass
};

inline constexpr std::int64_t kTriadFloats = std::int64_t{64} << 20, kUpdateElements = std::int64_t{256} << 20;

// `floats` elements per array (default 64 Mi: 3 × 256 MiB); `passes` ≥ 1 timed passes. Bytes as
// STREAM counts them: 3 arrays × n floats (two read, one written; not the written array's lines
// read before they are written).
// Throws std::invalid_argument for fewer than one element or pass.
MemoryBandwidth measure_host_memory_bandwidth(std::int64_t floats = kTriadFloats, int passes = 5);

// `elements` parameters' worth of a bf16 update's arrays (default 256 Mi: 4 GiB, a pass as long
// as one unit's update of a large model, so that starting the cores and the pass's last chunks,
// which cost every pass the same, weigh as little as there), `passes` ≥ 1 timed passes. Bytes as
// the memory moves them, 30 an element: the gradient read (2), the fp32 master weights, m and v
// read and written (24), the new weights written (2) and their lines read first (2), as
// analysis/bound.py counts an update's.
// Throws std::invalid_argument for fewer than one element or pass.
MemoryBandwidth measure_host_update_bandwidth(std::int64_t elements = kUpdateElements, int passes = 10);

}  // namespace sweetspot
