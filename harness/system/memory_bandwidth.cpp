#include "harness/system/memory_bandwidth.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <vector>

#include "base/parallel_for.hpp"

namespace sweetspot {

TriadBandwidth measure_host_memory_bandwidth(std::int64_t floats, int passes) {
    if (floats < 1 || passes < 1)
        throw std::invalid_argument("measure_host_memory_bandwidth: needs at least one element and one pass");
    const auto n = static_cast<std::size_t>(floats);
    // Not value-initialised: the first pass below touches every page, over the cores as the timed ones.
    const auto a = std::make_unique_for_overwrite<float[]>(n);
    const auto b = std::make_unique_for_overwrite<float[]>(n);
    const auto c = std::make_unique_for_overwrite<float[]>(n);
    parallel_for(floats, [&](std::int64_t begin, std::int64_t end) {
        for (auto i = static_cast<std::size_t>(begin); i < static_cast<std::size_t>(end); ++i) {
            a[i] = 0.0f;
            b[i] = 1.0f;
            c[i] = 2.0f;
        }
    });
    const float s = 3.0f;
    const auto triad = [&] {
        parallel_for(floats, [&](std::int64_t begin, std::int64_t end) {
            for (auto i = static_cast<std::size_t>(begin); i < static_cast<std::size_t>(end); ++i) a[i] = b[i] + s * c[i];
        });
    };
    triad();
    std::vector<double> seconds;
    for (int p = 0; p < passes; ++p) {
        const auto t0 = std::chrono::steady_clock::now();
        triad();
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    // STREAM's best rate: the bandwidth is a ceiling, which a noisy neighbour's pass lowers, never raises.
    const double fastest = *std::min_element(seconds.begin(), seconds.end());
    TriadBandwidth out;
    out.bytes = 3 * floats * static_cast<std::int64_t>(sizeof(float));
    out.passes = passes;
    // Every element's result is 1 + 3·2: a pass that was optimised away would leave the zeros.
    if (a[0] != 7.0f || a[n - 1] != 7.0f) throw std::logic_error("measure_host_memory_bandwidth: the triad did not run");
    out.gbps = static_cast<double>(out.bytes) / fastest / 1e9;
    return out;
}

}  // namespace sweetspot
