#pragma once
// The host's memory bandwidth, measured over every core as the host's AdamW splits its pass
// (base/parallel_for.hpp), so the rates are ones that update can reach, in two ways:
// - STREAM's triad, a[i] = b[i] + s·c[i] over three float arrays far larger than the caches: the
//   figure every machine is compared by;
// - the host update's own streams (host_adamw's loads and stores, without its arithmetic): where
//   the cores, not the memory, set the rate, a pass of nine streams moves more than the triad's
//   three do, and the update itself beats the triad's rate;
// and, on memory the caller holds, the rate that memory moves at read and written in place. That
// one, over a cell's own update arrays (its optimizer state, gradients and weights), bounds an
// update made on the host's cores (optimizer = "host"), a term of a training cell's bound
// (analysis/bound.py), and the run's probe of the update's streams where a cell has not measured
// it: a lent virtual machine's memory can be much faster in one place than in another
// (docs/benchmarks.md, "Offloaded training"), so a probe the update's own arrays do not lie in may
// be faster than the update can be.
#include <array>
#include <cstdint>
#include <span>

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

// A unit's arrays as the host update streams them, `n` elements each: its fp32 master weights, m
// and v (read and written), and where given, in the cell's dtype (`dtype_bytes` an element, 2 or
// 4), its gradient (read) and its weights (written, their lines read first: as many bytes as
// reading and writing them).
struct UpdateArrays {
    std::array<float*, 3> state{};
    const void* gradient = nullptr;
    void* weights = nullptr;
    int dtype_bytes = 0;
    std::int64_t n = 0;
    // Bytes a pass moves for each element.
    std::int64_t element_bytes() const {
        return 3 * 8 + (gradient ? dtype_bytes : 0) + (weights ? 2 * dtype_bytes : 0);
    }
};

// Each group's arrays read and written back in place (the gradient only read), every bit left as
// it was, group after group, `passes` ≥ 1 timed passes after one untimed. Bytes: each group's
// element_bytes() an element.
// Throws std::invalid_argument for no element, fewer than one pass, or a gradient or weights
// whose dtype_bytes is neither 2 nor 4.
MemoryBandwidth measure_in_place_bandwidth(std::span<const UpdateArrays> groups, int passes = 3);

}  // namespace sweetspot
