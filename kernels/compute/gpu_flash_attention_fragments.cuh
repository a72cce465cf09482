#pragma once
// What the two tensor-core forms of the flash_attention kernel (gpu_flash_attention_mma.cuh for
// fp16 / bf16, gpu_flash_attention_tf32x3.cuh for fp32) share: the two-stage K and V tiles in
// shared memory, and the online softmax over a warp's score tile as mma.sync leaves it. Both
// instructions leave an m16n8 accumulator the same way:
// lane l holds rows l/4 and l/4 + 8 of the warp's 16, columns 2·(l % 4) and 2·(l % 4) + 1 of each
// 8-key n-tile, so the four lanes of a quad share a row and its max and sum are two shuffles.
// Included by gpu_flash_attention.cu only.
#include <cstddef>
#include <cstdint>

#include "kernels/compute/device_common.cuh"
#include "kernels/compute/dropout.hpp"
#include "kernels/compute/gpu_flash_attention_logsumexp.cuh"

namespace sweetspot::gpu {

// K and V tiles of kKeys keys in two stages of shared memory, [kKeys][kLd] each, key-major as in
// memory: the next tile's copies run while this one is computed with.
template <class T, int kHd, int kLd, int kKeys, int kThreads>
struct KvStages {
    static constexpr int kTileElems = kKeys * kLd;
    // The dynamic shared memory a block launches with: two stages of a K and a V tile.
    static constexpr std::size_t kBytes = 2 * 2 * static_cast<std::size_t>(kTileElems) * sizeof(T);
    T* tiles;  // stage s: K at 2s·kTileElems, V after it
    const T* k_g;
    const T* v_g;
    std::int64_t ld_qkv;
    int seq, tid;

    __device__ const T* k(int stage) const { return tiles + 2 * stage * kTileElems; }
    __device__ const T* v(int stage) const { return k(stage) + kTileElems; }

    // Keys k0 .. k0 + kKeys − 1 into `stage`, 16 bytes per cp.async, zeros past seq, as one group.
    __device__ void load(int k0, int stage) const {
        constexpr int kChunk = 16 / static_cast<int>(sizeof(T));
        static_assert(kHd % kChunk == 0, "rows of whole 16-byte chunks");
        T* const k_s = tiles + 2 * stage * kTileElems;
        T* const v_s = k_s + kTileElems;
        for (int i = tid; i < kKeys * kHd / kChunk; i += kThreads) {
            const int key = i / (kHd / kChunk), col = (i % (kHd / kChunk)) * kChunk;
            const int pos = k0 + key;
            const bool valid = pos < seq;
            const std::int64_t offset = valid ? pos * ld_qkv + col : 0;
            cp_async_16(&k_s[key * kLd + col], k_g + offset, valid);
            cp_async_16(&v_s[key * kLd + col], v_g + offset, valid);
        }
        cp_async_commit();
    }

    // At the top of the tile of keys k0 (in `stage`; the block's last key is `last`): starts the
    // next tile's copies into the other stage, once every warp is done with it, and waits for this
    // tile's. Every thread of the block calls it.
    __device__ void begin_tile(int k0, int stage, int last) const {
        __syncthreads();
        if (k0 + kKeys <= last) {
            load(k0 + kKeys, stage ^ 1);
            cp_async_wait<1>();  // this tile's copies are done; the next tile's may still run
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
    }
};

// Where a warp's score tile sits: its two rows (query positions), the tile's first key, and the
// (batch · n_head + head) row block of the dropout mask, `stride` rows each (sequence_spans.hpp).
struct ScoreTile {
    int rows[2];
    int k0;
    int pair;           // 2 · (lane % 4): the first of the lane's two columns in each n-tile
    bool diagonal;      // the tile reaches past the warp's first row: some keys are masked
    int bh, stride;
};

// Turns the scores s (raw Q·Kᵀ) into the tile's probabilities, in place, and brings the running
// max, sum and output up to this tile: the causal mask, the online softmax in base 2
// (scale_log2 = log2(e) / sqrt(hd)) and the dropout factor, which scales the numerator only.
// kMayDrop false leaves the dropout code out of a kernel launched only without dropout, so that
// its registers go to the accumulators.
template <bool kMayDrop = true, int kTiles, int kOutTiles>
__device__ __forceinline__ void online_softmax(float (&s)[kTiles][4], float (&o)[kOutTiles][4], float (&row_max)[2],
                                               float (&row_sum)[2], const ScoreTile& at, float scale_log2,
                                               const Dropout& dropout, std::uint32_t site) {
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = e / 2;
            const int key = at.k0 + j * 8 + at.pair + (e % 2);
            float v = s[j][e] * scale_log2;
            if (at.diagonal && key > at.rows[r]) v = -INFINITY;
            s[j][e] = v;
            tile_max[r] = fmaxf(tile_max[r], v);
        }
    }
    float rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float new_max = fmaxf(row_max[r], quad_max(tile_max[r]));
        rescale[r] = row_max[r] == -INFINITY ? 0.0f : exp2f(row_max[r] - new_max);
        row_max[r] = new_max;
    }
    float tile_sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int r = e / 2;
            const float p = s[j][e] == -INFINITY ? 0.0f : exp2f(s[j][e] - row_max[r]);
            tile_sum[r] += p;
            float keep = 1.0f;
            if (kMayDrop && dropout.active() && p != 0.0f) {
                const auto prob_row = static_cast<std::uint64_t>(at.bh) * static_cast<std::uint64_t>(at.stride) +
                                      static_cast<std::uint64_t>(at.rows[r]);
                keep = dropout.probability_factor(site, prob_row,
                                                  static_cast<std::uint64_t>(at.k0 + j * 8 + at.pair + e % 2));
            }
            s[j][e] = p * keep;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) row_sum[r] = row_sum[r] * rescale[r] + quad_sum(tile_sum[r]);
#pragma unroll
    for (int n = 0; n < kOutTiles; ++n) {
        o[n][0] *= rescale[0];
        o[n][1] *= rescale[0];
        o[n][2] *= rescale[1];
        o[n][3] *= rescale[1];
    }
}

// The logsumexp of the warp's two rows that are inside the sequence (row_sum is the quad's total
// by now), written by the quad's first lane at [bh, row] of `stride` rows a (batch, head); nothing
// when lse is null (the inference forward).
__device__ __forceinline__ void store_logsumexp(float* lse, const float (&row_max)[2], const float (&row_sum)[2],
                                                const int (&rows)[2], int bh, int stride, int length, int pair) {
    if (lse == nullptr || pair != 0) return;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (rows[r] < length)
            lse[static_cast<std::int64_t>(bh) * stride + rows[r]] = logsumexp_from_base2(row_max[r], row_sum[r]);
    }
}

}  // namespace sweetspot::gpu
