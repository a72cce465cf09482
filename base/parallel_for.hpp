#pragma once
// Splits [0, n) into contiguous chunks over the host's cores. For the element-wise passes over
// whole models (synthetic weights, dtype conversion: up to 13G elements), which are independent
// per element, so the result is the same however the work is divided.
#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace sweetspot {

template <class Body>  // Body: void(std::int64_t begin, std::int64_t end)
void parallel_for(std::int64_t n, const Body& body) {
    constexpr std::int64_t kMinChunk = std::int64_t{1} << 20;  // below this a thread costs more than it saves
    const auto workers = std::clamp<std::int64_t>(std::thread::hardware_concurrency(), 1, n / kMinChunk + 1);
    const std::int64_t chunk = (n + workers - 1) / workers;
    std::vector<std::jthread> threads;
    for (std::int64_t w = 1; w < workers; ++w) threads.emplace_back(body, w * chunk, std::min(n, (w + 1) * chunk));
    body(0, std::min(n, chunk));
}

}  // namespace sweetspot
