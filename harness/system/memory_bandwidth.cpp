#include "harness/system/memory_bandwidth.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/parallel_for.hpp"

namespace sweetspot {
namespace {

void check_size(const char* who, std::int64_t elements, int passes) {
    if (elements < 1 || passes < 1)
        throw std::invalid_argument(std::string(who) + ": needs at least one element and one pass");
}

// `pass` once untimed (the caches and the page tables warm), then `passes` times: the rate of the
// fastest, STREAM's best rate (the bandwidth is a ceiling, which a noisy neighbour's pass lowers,
// never raises).
template <class Pass>
MemoryBandwidth best_rate(std::int64_t bytes, int passes, const Pass& pass) {
    pass();
    std::vector<double> seconds;
    for (int p = 0; p < passes; ++p) {
        const auto t0 = std::chrono::steady_clock::now();
        pass();
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    MemoryBandwidth out;
    out.bytes = bytes;
    out.passes = passes;
    out.gbps = static_cast<double>(bytes) / *std::min_element(seconds.begin(), seconds.end()) / 1e9;
    return out;
}

// One pass of the update probe over [begin, end): each of the update's arrays read and written as
// host_adamw reads and writes them, with an add where it has its arithmetic (the gradient's 1 to
// the three fp32 arrays). Built as host_adamw's loop is (AVX-512 or AVX2 where the cores have
// it), so the probe moves the streams at least as fast as the update can, and its rate stays a
// ceiling.
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
void update_streams(const std::uint16_t* gradient, std::uint16_t* weights, float* master, float* m, float* v,
                    std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
        const auto g = std::bit_cast<float>(std::uint32_t{gradient[i]} << 16);
        m[i] += g;
        v[i] += g;
        master[i] += g;
        weights[i] = gradient[i];
    }
}

// One group's arrays read and written back over [begin, end), every bit kept: each element is
// XORed with `zero`, which the caller reads through a volatile so that the compiler cannot drop
// the stores as writing back what was loaded; the gradient's elements are XORed together into
// what it returns, for the caller to keep. On the bits, not the values: no arithmetic, so a NaN
// keeps its payload and a signalling one stays signalling. Inlined into each build of the loop
// below, once for each width of the dtype.
template <class Word>
[[gnu::always_inline]] inline Word rewrite_words(const UpdateArrays& group, std::uint32_t zero, std::int64_t begin,
                                                 std::int64_t end) {
    const auto rewrite = [zero](float& x) { x = std::bit_cast<float>(std::bit_cast<std::uint32_t>(x) ^ zero); };
    float *const a = group.state[0], *const b = group.state[1], *const c = group.state[2];
    const auto* const gradient = static_cast<const Word*>(group.gradient);
    auto* const weights = static_cast<Word*>(group.weights);
    const auto word_zero = static_cast<Word>(zero);
    Word seen = 0;
    for (std::int64_t i = begin; i < end; ++i) {
        rewrite(a[i]);
        rewrite(b[i]);
        rewrite(c[i]);
        if (gradient) seen ^= gradient[i];
        if (weights) weights[i] ^= word_zero;
    }
    return seen;
}

__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
std::uint32_t rewrite_in_place(const UpdateArrays& group, std::uint32_t zero, std::int64_t begin, std::int64_t end) {
    return group.dtype_bytes == 2 ? rewrite_words<std::uint16_t>(group, zero, begin, end)
                                  : rewrite_words<std::uint32_t>(group, zero, begin, end);
}

}  // namespace

MemoryBandwidth measure_host_memory_bandwidth(std::int64_t floats, int passes) {
    check_size("measure_host_memory_bandwidth", floats, passes);
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
    const MemoryBandwidth out = best_rate(3 * floats * std::int64_t{sizeof(float)}, passes, [&] {
        parallel_for(floats, [&](std::int64_t begin, std::int64_t end) {
            for (auto i = static_cast<std::size_t>(begin); i < static_cast<std::size_t>(end); ++i)
                a[i] = b[i] + s * c[i];
        });
    });
    // Every element's result is 1 + 3·2: a pass that was optimised away would leave the zeros.
    if (a[0] != 7.0f || a[n - 1] != 7.0f)
        throw std::logic_error("measure_host_memory_bandwidth: the triad did not run");
    return out;
}

MemoryBandwidth measure_host_update_bandwidth(std::int64_t elements, int passes) {
    check_size("measure_host_update_bandwidth", elements, passes);
    const auto n = static_cast<std::size_t>(elements);
    const auto gradient = std::make_unique_for_overwrite<std::uint16_t[]>(n);
    const auto weights = std::make_unique_for_overwrite<std::uint16_t[]>(n);
    const auto master = std::make_unique_for_overwrite<float[]>(n);
    const auto m = std::make_unique_for_overwrite<float[]>(n);
    const auto v = std::make_unique_for_overwrite<float[]>(n);
    constexpr std::uint16_t kOne = 0x3f80;  // 1.0 in bf16
    parallel_for(elements, [&](std::int64_t begin, std::int64_t end) {
        for (auto i = static_cast<std::size_t>(begin); i < static_cast<std::size_t>(end); ++i) {
            gradient[i] = kOne;
            weights[i] = 0;
            master[i] = m[i] = v[i] = 0.0f;
        }
    });
    const MemoryBandwidth out = best_rate(30 * elements, passes, [&] {
        parallel_for(elements, [&](std::int64_t begin, std::int64_t end) {
            update_streams(gradient.get(), weights.get(), master.get(), m.get(), v.get(), begin, end);
        });
    });
    const auto all_passes = static_cast<float>(passes + 1);
    if (m[0] != all_passes || v[n - 1] != all_passes || master[n - 1] != all_passes || weights[n - 1] != kOne)
        throw std::logic_error("measure_host_update_bandwidth: the passes did not run");
    return out;
}

MemoryBandwidth measure_in_place_bandwidth(std::span<const UpdateArrays> groups, int passes) {
    std::int64_t elements = 0, bytes = 0;
    for (const UpdateArrays& g : groups) {
        if ((g.gradient || g.weights) && g.dtype_bytes != 2 && g.dtype_bytes != 4) {
            throw std::invalid_argument("measure_in_place_bandwidth: a gradient or weights of " +
                                        std::to_string(g.dtype_bytes) + " bytes an element (2 or 4)");
        }
        elements += g.n;
        bytes += g.n * g.element_bytes();
    }
    check_size("measure_in_place_bandwidth", elements, passes);
    volatile std::uint32_t opaque_zero = 0;
    const std::uint32_t zero = opaque_zero;
    std::atomic<std::uint32_t> seen{0};  // the gradients' words, kept so that reading them is not dropped
    return best_rate(bytes, passes, [&] {
        for (const UpdateArrays& g : groups) {
            parallel_for(g.n, [&](std::int64_t begin, std::int64_t end) {
                seen.fetch_xor(rewrite_in_place(g, zero, begin, end), std::memory_order_relaxed);
            });
        }
    });
}

}  // namespace sweetspot
