#pragma once
// Dropout masks that every path draws identically: the CPU forward, the float64 reference and
// every GPU kernel, fused or not. An element is kept or dropped by a counter-based generator
// (Philox-4x32-10) keyed by the cell's seed and counted by (site, element), so the decision
// depends only on where the element is, never on the order or the thread that computes it.
// That is what lets a fused kernel be compared exactly with the unfused ones with dropout on.
// Elements are numbered by their coordinates with the model's max_positions as the position
// stride, not by their offset in a buffer of this run's seq: a run over a prefix of the
// sequences (the checks recompute a prefix) draws the same masks as the whole run.
// Compiled by both the host compiler and nvcc (the functions are __host__ __device__ there).
#include <cstdint>

#include "base/host_device.hpp"

namespace sweetspot {

// Where a mask is drawn: each dropout of GPT-2 in each layer has its own site, so their masks
// are independent.
enum class DropoutSite : std::uint32_t { embedding, attention_probs, attention_residual, mlp_residual };

struct Dropout {
    float p = 0.0f;          // probability of dropping an element; 0 turns dropout off
    std::uint64_t seed = 0;  // the cell's seed
    int seq = 1;             // positions per sequence in the run drawing the mask
    int positions = 1;       // the model's max_positions (≥ seq)

    // This dropout in a run of `seq_` positions of a model of `positions_`.
    Dropout for_shape(int seq_, int positions_) const {
        Dropout d = *this;
        d.seq = seq_;
        d.positions = positions_;
        return d;
    }

    SWEETSPOT_HOST_DEVICE bool active() const { return p > 0.0f; }

    // The counter word of `site` in `layer` (the embedding's layer is 0).
    SWEETSPOT_HOST_DEVICE static std::uint32_t site_word(DropoutSite site, int layer) {
        return static_cast<std::uint32_t>(layer) * 4u + static_cast<std::uint32_t>(site);
    }

    // The factor of element i of row `row` of a [batch·seq, width] activation (row = b·seq + t).
    SWEETSPOT_HOST_DEVICE float row_factor(std::uint32_t site, std::uint64_t row, std::uint64_t width,
                                           std::uint64_t i) const {
        const std::uint64_t b = row / static_cast<std::uint64_t>(seq), t = row % static_cast<std::uint64_t>(seq);
        return factor(site, (b * static_cast<std::uint64_t>(positions) + t) * width + i);
    }
    // The factor of probability j of row `row` of the [batch·heads·seq, seq] attention
    // probabilities (row = (b·H + h)·seq + t).
    SWEETSPOT_HOST_DEVICE float probability_factor(std::uint32_t site, std::uint64_t row, std::uint64_t j) const {
        const std::uint64_t bh = row / static_cast<std::uint64_t>(seq), t = row % static_cast<std::uint64_t>(seq);
        const std::uint64_t stride = static_cast<std::uint64_t>(positions);
        return factor(site, (bh * stride + t) * stride + j);
    }

    // 0 for a dropped element, 1 / (1 − p) for a kept one (inverted dropout: the expectation of
    // each element is unchanged).
    SWEETSPOT_HOST_DEVICE float factor(std::uint32_t site, std::uint64_t element) const {
        if (!active()) return 1.0f;
        const float u = uniform(site, element);
        return u < p ? 0.0f : 1.0f / (1.0f - p);
    }

    // A uniform number in [0, 1) with 24 random bits, from the first word of one Philox block.
    SWEETSPOT_HOST_DEVICE float uniform(std::uint32_t site, std::uint64_t element) const {
        std::uint32_t c0 = static_cast<std::uint32_t>(element), c1 = static_cast<std::uint32_t>(element >> 32);
        std::uint32_t c2 = site, c3 = 0;
        std::uint32_t k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
        // Philox-4x32 round constants (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
        constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
        constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
        for (int round = 0; round < 10; ++round) {
            const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c0;
            const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c2;
            const std::uint32_t hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
            const std::uint32_t hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
            const std::uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
            c0 = n0;
            c1 = lo1;
            c2 = n2;
            c3 = lo0;
            k0 += kWeyl0;
            k1 += kWeyl1;
        }
        return static_cast<float>(c0 >> 8) * (1.0f / 16777216.0f);
    }
};

}  // namespace sweetspot
