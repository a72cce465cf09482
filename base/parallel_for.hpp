#pragma once
// Splits [0, n) over the host's cores, for the element-wise passes over whole models (synthetic
// weights, dtype conversion, the host's AdamW: up to 13G elements), which are independent per
// element, so the result is the same however the work is divided. The range is cut into chunks
// that each core takes in turn, the next one free, rather than into one equal share per core: a
// core slowed by a neighbour (another tenant of the host, the caller's other threads) then takes
// fewer chunks, and the pass ends when the memory has moved its bytes, not when the slowest share
// does.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace sweetspot {

template <class Body>  // Body: void(std::int64_t begin, std::int64_t end)
void parallel_for(std::int64_t n, const Body& body) {
    // Large enough that taking a chunk costs nothing beside streaming it, small enough that the
    // last chunks taken end close together.
    constexpr std::int64_t kChunk = std::int64_t{1} << 18;
    if (n <= 0) return;
    const std::int64_t chunks = (n + kChunk - 1) / kChunk;
    const auto workers = std::clamp<std::int64_t>(std::thread::hardware_concurrency(), 1, chunks);
    std::atomic<std::int64_t> next{0};
    const auto work = [&] {
        for (std::int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1))
            body(c * kChunk, std::min(n, (c + 1) * kChunk));
    };
    std::vector<std::jthread> threads;
    for (std::int64_t w = 1; w < workers; ++w) threads.emplace_back(work);
    work();
}

}  // namespace sweetspot
