#pragma once
// The tensor-core form of the flash attention backward for fp32, at head dims that are multiples
// of 16 up to 128: the fp16 / bf16 backward's layout (gpu_flash_attention_backward_mma.cuh) with
// the forward's 3xTF32 products (gpu_flash_attention_tf32x3.cuh: each operand split into a TF32
// big and small part, three mma.sync m16n8k8 per product, fp32 accumulation), so the gradients are
// as accurate as the CUDA-core kernel's. Included by gpu_flash_attention_backward.cu only.
//
// A block is 4 warps and 64 keys of one (batch, q head); each warp owns 16 keys and keeps their dK
// and dV accumulators [16, hd] in registers. The block walks the tiles of 32 or 16 queries
// (Tuning) that see its keys, and per tile each warp computes, with its keys as the rows:
//   Sᵀ  = K·Qᵀ       A = the warp's K rows, B = Q as stored (query-major is the "col" operand);
//   dPᵀ = V·dOᵀ      the same with V and dO;
//   Pᵀ, dSᵀ, Aᵀ      in registers, as the fp16 / bf16 backward computes them;
//   dV += Aᵀ·dO      Aᵀ's accumulators are the A fragments with the queries of a k-step in the
//                    order the accumulators hold them (lane column t ↔ query 2t, t + 4 ↔ 2t + 1),
//                    as the forward's P·V, and dO's B fragment is read in the same order;
//   dK += dSᵀ·Q      the same with Q;
//   dQ += dS·K       across the warps' keys: dSᵀ goes to shared memory, each warp then takes 16
//                    of the tile's queries and all, half or a quarter of the head dim, with the
//                    keys of a k-step in the same pairwise order in A (dSᵀ) and B (K), and adds
//                    its share to dQ's fp32 accumulator, two floats per atomic.
// Fragments come by plain 32-bit loads. Rows of K, V, Q and dO are padded to hd + 4 floats, rows
// of dSᵀ to the tile + 4: every fragment a warp reads then falls in 32 banks (8 rows × 4 columns
// at a row length of 4 mod 8 words, or 4 row pairs × 8 columns at a row pair length of 8 mod 32).
// Q, dO, lse and D come in two stages, the next tile's copies running while this one is
// computed with; dSᵀ takes the place of this tile's Q and dO once every warp's dV and dK products
// have read them.
#include <cstddef>
#include <cstdint>

#include "kernels/compute/device_common.cuh"
#include "kernels/compute/dropout.hpp"
#include "kernels/compute/gpu_flash_attention_backward_block.cuh"
#include "kernels/compute/gpu_flash_attention_logsumexp.cuh"
#include "kernels/compute/gpu_flash_attention_tf32x3.cuh"
#include "kernels/compute/qkv_heads.hpp"
#include "kernels/compute/sequence_spans.hpp"

namespace sweetspot::gpu::backward_tf32x3 {

using tf32x3::mma_3xtf32;
using tf32x3::Split;
using tf32x3::split;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kKeysPerWarp = 16;
constexpr int kKeys = kWarps * kKeysPerWarp;  // keys per block
constexpr int kPad = 4;

// Shared memory of a block: K, V [kKeys][kHd + kPad], then two stages of Q and dO
// [kQueries][kHd + kPad] (dSᵀ [kKeys][kQueries + kPad] in their place at the end of a tile), then
// two stages of lse and D [kQueries], all fp32.
template <int kHd, int kQueries>
constexpr int stage_floats() {
    return 2 * kQueries * (kHd + kPad);
}
template <int kHd, int kQueries>
constexpr std::size_t shared_bytes() {
    static_assert(kKeys * (kQueries + kPad) <= stage_floats<kHd, kQueries>(), "dSᵀ fits in a stage's Q and dO");
    return (2 * static_cast<std::size_t>(kKeys) * (kHd + kPad) + 2 * static_cast<std::size_t>(stage_floats<kHd, kQueries>()) +
            2 * 2 * kQueries) *
           sizeof(float);
}

// rows rows of one head's [seq, ·] matrix (row stride ld_src) from row0 into shared memory rows of
// kLd floats, 16 bytes per cp.async, zeros past seq (the caller commits and waits).
template <int kHd, int kLd>
__device__ __forceinline__ void load_rows(float* dst, const float* src, std::int64_t ld_src, int row0, int rows, int seq,
                                          int tid) {
    constexpr int kChunks = kHd / 4;
    for (int i = tid; i < rows * kChunks; i += kThreads) {
        const int r = i / kChunks, col = (i % kChunks) * 4;
        const bool valid = row0 + r < seq;
        cp_async_16(dst + r * kLd + col, src + (valid ? (row0 + r) * ld_src + col : 0), valid);
    }
}

// acc[16 × kQueries] += rows[16 × kHd] · colsᵀ, rows = the warp's 16 rows of a [·][kLd] tile (its
// keys), cols = a [kQueries][kLd] tile (the queries), both as stored. Lane (group, quad) reads A
// at rows group, group + 8 and B at row group, each at columns quad and quad + 4 of the k-step.
template <int kHd, int kLd, int kQueries>
__device__ __forceinline__ void rows_times_cols(float (&acc)[kQueries / 8][4], const float* rows, const float* cols,
                                                int group, int quad) {
#pragma unroll
    for (int kk = 0; kk < kHd / 8; ++kk) {
        const float* a_at = rows + group * kLd + kk * 8 + quad;
        const Split a[4] = {split(a_at[0]), split(a_at[8 * kLd]), split(a_at[4]), split(a_at[8 * kLd + 4])};
#pragma unroll
        for (int j = 0; j < kQueries / 8; ++j) {
            const float* b_at = cols + (j * 8 + group) * kLd + kk * 8 + quad;
            mma_3xtf32(acc[j], a, b_at[0], b_at[4]);
        }
    }
}

// acc[16 × kHd] += x[16 × kQueries] · tile[kQueries × kHd], x given as the accumulators of a
// rows_times_cols, tile = a [kQueries][kLd] tile as stored. k-step kk is x's n-tile kk, whose
// accumulators (rows group, group + 8; queries 2·quad, 2·quad + 1) are the A fragment with the
// queries in the order (2·quad ↔ column quad, 2·quad + 1 ↔ quad + 4); B is read in that order.
// The tile's product is summed from zero, a few n-tiles at a time, and then added to acc in fp32:
// the tensor cores truncate each fp32 sum, and a running sum over every query tile (hundreds of
// products at seq 777) would drift by it to above 1e-5 of dK and dV.
template <int kHd, int kLd, int kQueries>
__device__ __forceinline__ void accumulate_times_tile(float (&acc)[kHd / 8][4], const float (&x)[kQueries / 8][4],
                                                      const float* tile, int group, int quad) {
    constexpr int kChunk = (kHd / 8) % 4 == 0 ? 4 : 2;  // n-tiles per fresh sum
    Split a[kQueries / 8][4];
#pragma unroll
    for (int kk = 0; kk < kQueries / 8; ++kk) {
        a[kk][0] = split(x[kk][0]);
        a[kk][1] = split(x[kk][2]);
        a[kk][2] = split(x[kk][1]);
        a[kk][3] = split(x[kk][3]);
    }
#pragma unroll
    for (int n0 = 0; n0 < kHd / 8; n0 += kChunk) {
        float part[kChunk][4] = {};
#pragma unroll
        for (int kk = 0; kk < kQueries / 8; ++kk) {
            const float* b_at = tile + (kk * 8 + 2 * quad) * kLd + n0 * 8 + group;
#pragma unroll
            for (int n = 0; n < kChunk; ++n) mma_3xtf32(part[n], a[kk], b_at[n * 8], b_at[kLd + n * 8]);
        }
#pragma unroll
        for (int n = 0; n < kChunk; ++n) {
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[n0 + n][e] += part[n][e];
        }
    }
}

// Grid, dq_acc, lse, delta and the dropout forms as the fp16 / bf16 kernel's: one dimension, the
// key blocks of each (batch, head) side by side (block x: head x / key_blocks, keys
// 64·(x % key_blocks)..), so the blocks running at once share a few heads' Q, dO and dQ
// accumulator in L2; qkv packed as `heads` says and the rows as `spans`; dq_acc [rows, c] gets
// this block's share of dQ / scale; the q head's dK and dV go to dkv at row stride ld_dkv. Shared
// memory: shared_bytes. kQueries: the query tile; kMinBlocks: the blocks per SM the registers are
// budgeted for.
template <int kHd, bool kDropout, int kQueries, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    flash_attention_backward_tf32x3_kernel(float* dq_acc, float* dkv, std::int64_t ld_dkv, const float* dout,
                                           const float* qkv, const float* lse, const float* delta, SequenceSpans spans,
                                           std::int64_t rows, QkvHeads heads, float scale_log2, Dropout dropout,
                                           std::uint32_t site) {
    static_assert(kHd % 16 == 0 && kHd <= 128, "head dims that are multiples of 16, up to 128");
    static_assert(kQueries == 32 || kQueries == 16, "query tiles of 32 or 16");
    constexpr int kLd = kHd + kPad;
    constexpr int kLdS = kQueries + kPad;  // a row of dSᵀ in shared memory
    extern __shared__ float4 shared_f4[];
    float* const k_s = reinterpret_cast<float*>(shared_f4);
    float* const v_s = k_s + kKeys * kLd;
    float* const stages = v_s + kKeys * kLd;  // stage i: Q at i·stage_floats, dO after it
    float* const stats = stages + 2 * stage_floats<kHd, kQueries>();  // stage i: lse, D

    const int c = heads.c();
    const BackwardBlock block(kKeys, spans, heads);
    const int h = block.h, key0 = block.key0, seq = block.seq;
    if (key0 >= seq) return;  // a key block past a shorter sequence's end
    const auto [row0, qkv_b, q_g, do_g, stat0, delta_b] = block.rows(kHd, qkv, dout, delta, spans, rows, heads);
    const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
    const int group = lane / 4, quad = lane % 4, pair = 2 * quad;
    const std::int64_t ld_qkv = heads.ld();
    const std::int64_t head = static_cast<std::int64_t>(h) * kHd;
    const int warp_key0 = key0 + warp * kKeysPerWarp;
    const int keys[2] = {warp_key0 + group, warp_key0 + group + 8};

    // The query tile q0 into `stage`: Q, dO, lse and D, as one group of copies.
    const auto load_queries = [&](int q0, int stage) {
        float* const q_s = stages + stage * stage_floats<kHd, kQueries>();
        load_rows<kHd, kLd>(q_s, q_g, ld_qkv, q0, kQueries, seq, tid);
        load_rows<kHd, kLd>(q_s + kQueries * kLd, do_g, c, q0, kQueries, seq, tid);
        if (tid < 2 * kQueries) {
            const int i = tid % kQueries;
            const bool valid = q0 + i < seq;
            const float* src = tid < kQueries ? lse + (valid ? stat0 + q0 + i : 0) : delta_b + (valid ? q0 + i : 0);
            cp_async_4(stats + stage * 2 * kQueries + tid, src, valid);
        }
        cp_async_commit();
    };
    load_rows<kHd, kLd>(k_s, qkv_b + heads.k_col(h), ld_qkv, key0, kKeys, seq, tid);
    load_rows<kHd, kLd>(v_s, qkv_b + heads.v_col(h), ld_qkv, key0, kKeys, seq, tid);
    load_queries(key0, 0);

    float dv[kHd / 8][4] = {}, dk[kHd / 8][4] = {};
    for (int q0 = key0, stage = 0; q0 < seq; q0 += kQueries, stage ^= 1) {
        cp_async_wait<0>();
        __syncthreads();  // this tile is here for every warp, and the other stage is free
        if (q0 + kQueries < seq) load_queries(q0 + kQueries, stage ^ 1);
        float* const q_s = stages + stage * stage_floats<kHd, kQueries>();
        const float* const do_s = q_s + kQueries * kLd;
        const float* const lse_s = stats + stage * 2 * kQueries;
        const float* const delta_s = lse_s + kQueries;

        float s[kQueries / 8][4] = {}, dp[kQueries / 8][4] = {};
        rows_times_cols<kHd, kLd, kQueries>(s, k_s + warp * kKeysPerWarp * kLd, q_s, group, quad);
        rows_times_cols<kHd, kLd, kQueries>(dp, v_s + warp * kKeysPerWarp * kLd, do_s, group, quad);

        // s becomes Aᵀ = Pᵀ∘f and dp becomes dSᵀ. Element e of n-tile j: key keys[e / 2], query
        // q0 + 8j + pair + e % 2. Only the diagonal tiles and a tile past seq mask anything.
        const bool edge = q0 < key0 + kKeys || q0 + kQueries > seq;
#pragma unroll
        for (int j = 0; j < kQueries / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int qq = j * 8 + pair + e % 2, query = q0 + qq, key = keys[e / 2];
                float p = exp2f(fmaf(s[j][e], scale_log2, -lse_s[qq] * kLog2e));
                if (edge && (key > query || query >= seq)) p = 0.0f;
                float f = 1.0f;
                if (kDropout && p != 0.0f)
                    f = dropout.probability_factor(site, static_cast<std::uint64_t>(stat0 + query),
                                                   static_cast<std::uint64_t>(key));
                dp[j][e] = p * (dp[j][e] * f - delta_s[qq]);
                s[j][e] = p * f;
            }
        }

        accumulate_times_tile<kHd, kLd, kQueries>(dv, s, do_s, group, quad);
        accumulate_times_tile<kHd, kLd, kQueries>(dk, dp, q_s, group, quad);
        __syncthreads();  // every warp's products have read Q and dO: dSᵀ takes their place

        float* const ds_s = q_s;  // dSᵀ [kKeys][kLdS]
        float* const ds_rows = ds_s + (warp * kKeysPerWarp + group) * kLdS;
#pragma unroll
        for (int j = 0; j < kQueries / 8; ++j) {
            *reinterpret_cast<float2*>(ds_rows + j * 8 + pair) = make_float2(dp[j][0], dp[j][1]);
            *reinterpret_cast<float2*>(ds_rows + 8 * kLdS + j * 8 + pair) = make_float2(dp[j][2], dp[j][3]);
        }
        __syncthreads();  // every warp's dSᵀ is stored

        // dQ [kQueries × kHd] += dS·K, each warp 16 queries and kHd / kParts columns. k-step kk:
        // keys 8kk.., lane column quad ↔ key 2·quad, quad + 4 ↔ 2·quad + 1; A = dS from dSᵀ
        // (queries group, group + 8), B = K as stored (column group of each n-tile).
        constexpr int kRowGroups = kQueries / 16, kParts = kWarps / kRowGroups;
        constexpr int kTilesPerWarp = kHd / 8 / kParts;
        static_assert(kHd % (8 * kParts) == 0, "whole n-tiles per warp");
        const int warp_q = (warp % kRowGroups) * 16, n0 = (warp / kRowGroups) * kTilesPerWarp;
        float acc[kTilesPerWarp][4] = {};
#pragma unroll
        for (int kk = 0; kk < kKeys / 8; ++kk) {
            const float* a_at = ds_s + (kk * 8 + 2 * quad) * kLdS + warp_q + group;
            const Split a[4] = {split(a_at[0]), split(a_at[8]), split(a_at[kLdS]), split(a_at[kLdS + 8])};
            const float* b_at = k_s + (kk * 8 + 2 * quad) * kLd + n0 * 8 + group;
#pragma unroll
            for (int n = 0; n < kTilesPerWarp; ++n) mma_3xtf32(acc[n], a, b_at[n * 8], b_at[kLd + n * 8]);
        }
        const int q_rows[2] = {q0 + warp_q + group, q0 + warp_q + group + 8};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            if (q_rows[r] >= seq) continue;
            float* dq_row = dq_acc + (row0 + q_rows[r]) * c + head + n0 * 8 + pair;
#pragma unroll
            for (int n = 0; n < kTilesPerWarp; ++n)
                atomicAdd(reinterpret_cast<float2*>(dq_row + n * 8), make_float2(acc[n][2 * r], acc[n][2 * r + 1]));
        }
    }

    // dK = scale·dSᵀ·Q (scale = scale_log2 / log2(e)) and dV, two elements per 8-byte store.
    const float scale = scale_log2 * kLn2;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (keys[r] >= seq) continue;
        float* row = dkv + (row0 + keys[r]) * ld_dkv + head;
#pragma unroll
        for (int n = 0; n < kHd / 8; ++n) {
            *reinterpret_cast<float2*>(row + n * 8 + pair) = make_float2(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
            *reinterpret_cast<float2*>(row + c + n * 8 + pair) = make_float2(dv[n][2 * r], dv[n][2 * r + 1]);
        }
    }
}

// The query tile and the blocks per SM each head dim launches with: tiles of 32 queries, the
// registers budgeted for three blocks up to head dim 64 (what shared memory holds at 64; a few
// words spill) and two above; at head dim 128 tiles of 16, so that two blocks still fit. 16-query
// tiles with four blocks at head dim 64 ran no faster on an H100 (docs/benchmarks-history.md).
template <int kHd>
struct Tuning {
    static constexpr int kQueries = kHd <= 96 ? 32 : 16;
    static constexpr int kMinBlocks = kHd <= 64 ? 3 : 2;
};

// The kernel of (kHd, kDropout) with its tuning, and the shared memory it launches with.
template <int kHd, bool kDropout>
constexpr auto tuned_kernel =
    flash_attention_backward_tf32x3_kernel<kHd, kDropout, Tuning<kHd>::kQueries, Tuning<kHd>::kMinBlocks>;
template <int kHd>
constexpr std::size_t tuned_shared_bytes = shared_bytes<kHd, Tuning<kHd>::kQueries>();

}  // namespace sweetspot::gpu::backward_tf32x3
