#pragma once
// The tensor-core form of the flash attention backward, for fp16 and bf16 at head dims that are
// multiples of 16 up to 96: FlashAttention-2's backward with mma.sync m16n8k16 (fp32
// accumulation), the forward's instructions (gpu_flash_attention_mma.cuh). Included by
// gpu_flash_attention_backward.cu only; head dim 128 takes gpu_flash_attention_backward_mma_2d.cuh,
// which shares this file's tile loads.
//
// A block is 4 warps of 16 keys each, of one (batch, q head); each warp keeps its keys' dK
// and dV accumulators [16, hd] in registers. The block walks the tiles of 32 or 64 queries
// (Tuning) that see its keys (causal: from its first key on), and per tile each warp computes,
// with its keys as the rows (the transposed products, so every result lands in the warp's own
// accumulators):
//   Sᵀ  = K·Qᵀ       A = the warp's K rows, B = Q as stored (query-major is the "col" operand);
//                    where registers allow (Tuning), the warp's K and V fragments are loaded
//                    once and stay in registers: counted per tile, the operands' shared-memory
//                    reads cost the SM more than the products' mma instructions;
//   dPᵀ = V·dOᵀ      the same with V and dO;
//   Pᵀ = exp2(Sᵀ·log2(e)/sqrt(hd) − lse·log2(e)), dSᵀ = Pᵀ∘(f∘dPᵀ − D), Aᵀ = Pᵀ∘f, in registers;
//   dV += Aᵀ·dO      Aᵀ's accumulators re-packed as A fragments; dO by ldmatrix.trans;
//   dK += dSᵀ·Q      the same with Q;
//   dQ += dS·K       across the warps' keys: dSᵀ goes to shared memory, each warp then takes 16
//                    of the tile's queries and all or half of the head dim (A by ldmatrix.trans
//                    of dSᵀ, B = K by ldmatrix.trans) and adds its share to dQ's fp32
//                    accumulator, two floats per atomic.
// K, V, Q, dO and dSᵀ are in shared memory, rows padded by 8 elements as in the forward. Q, dO,
// lse and D come in two stages: the next query tile's copies run while this one is computed with.
// dSᵀ has its own buffer, so a warp stores it before its dV and dK products and the block meets
// at two barriers per tile: those products run while the other warps catch up.
// On the diagonal a warp whose keys all come after the tile's queries skips the tile's products
// (its probabilities are all masked) and stores zeros as its dSᵀ.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/compute/device_common.cuh"
#include "kernels/compute/dropout.hpp"
#include "kernels/compute/gpu_flash_attention_backward_block.cuh"
#include "kernels/compute/gpu_flash_attention_logsumexp.cuh"
#include "kernels/compute/gpu_flash_attention_mma.cuh"
#include "kernels/compute/qkv_heads.hpp"
#include "kernels/compute/sequence_spans.hpp"

namespace sweetspot::gpu::backward_mma {

using mma::ldmatrix_x4;
using mma::ldmatrix_x4_trans;
using mma::mma_16816;
using mma::pack;

constexpr int kKeysPerWarp = 16;
constexpr int kPad = 8;

// Shared memory of a block: K, V [kKeys][kHd + kPad], two stages of Q and dO
// [kQueries][kHd + kPad], dSᵀ [kKeys][kQueries + kPad], all in T; then two stages of lse and D
// [kQueries] in fp32.
template <int kHd, int kQueries>
constexpr int stage_elems() {
    return 2 * kQueries * (kHd + kPad);
}
template <class T, int kHd, int kQueries, int kWarps>
constexpr std::size_t shared_bytes() {
    constexpr int kKeys = kWarps * kKeysPerWarp;
    return (2 * static_cast<std::size_t>(kKeys) * (kHd + kPad) +
            2 * static_cast<std::size_t>(stage_elems<kHd, kQueries>()) +
            static_cast<std::size_t>(kKeys) * (kQueries + kPad)) *
               sizeof(T) +
           2 * 2 * kQueries * sizeof(float);
}

// rows rows of one head's [seq, ·] matrix (row stride ld_src) from row0 into shared memory rows of
// kLd, 16 bytes per cp.async, zeros past seq (the caller commits and waits).
template <class T, int kHd, int kLd, int kThreads>
__device__ __forceinline__ void load_tile(T* dst, const T* src, std::int64_t ld_src, int row0, int rows, int seq,
                                          int tid) {
    constexpr int kChunk = 16 / static_cast<int>(sizeof(T));
    for (int i = tid; i < rows * (kHd / kChunk); i += kThreads) {
        const int r = i / (kHd / kChunk), col = (i % (kHd / kChunk)) * kChunk;
        const bool valid = row0 + r < seq;
        cp_async_16(dst + r * kLd + col, src + (valid ? (row0 + r) * ld_src + col : 0), valid);
    }
}

// The A fragment of head-dim step kk (columns 16·kk ..) of 16 rows of a [·][kLd] tile (the
// warp's keys): matrices (rows 8·(m % 2).., d 16·kk + 8·(m / 2)).
template <int kLd, class T>
__device__ __forceinline__ void row_fragment(std::uint32_t (&a)[4], const T* rows, int kk, int lane) {
    const int matrix = lane / 8, matrix_row = lane % 8;
    ldmatrix_x4(a, &rows[((matrix % 2) * 8 + matrix_row) * kLd + kk * 16 + (matrix / 2) * 8]);
}

// acc[16 × kQueries] += a · colsᵀ over head-dim step kk, a = row_fragment's, cols = a
// [kQueries][kLd] tile (the queries) as stored.
template <class T, int kLd, int kQueries>
__device__ __forceinline__ void fragment_times_cols(float (&acc)[kQueries / 8][4], const std::uint32_t (&a)[4],
                                                    const T* cols, int kk, int lane) {
    const int matrix = lane / 8, matrix_row = lane % 8;
#pragma unroll
    for (int j = 0; j < kQueries / 8; j += 2) {
        // B of n-tiles j and j + 1: matrices (queries 8·(j + m / 2).., d 16·kk + 8·(m % 2)).
        std::uint32_t bf[4];
        ldmatrix_x4(bf, &cols[((j + matrix / 2) * 8 + matrix_row) * kLd + kk * 16 + (matrix % 2) * 8]);
        mma_16816<T>(acc[j], a, bf[0], bf[1]);
        mma_16816<T>(acc[j + 1], a, bf[2], bf[3]);
    }
}

// acc[16 × kQueries] += rows[16 × kHd] · colsᵀ, rows = 16 rows of a [·][kLd] tile (the warp's
// keys), cols = a [kQueries][kLd] tile (the queries), both as stored.
template <class T, int kHd, int kLd, int kQueries>
__device__ __forceinline__ void rows_times_cols(float (&acc)[kQueries / 8][4], const T* rows, const T* cols, int lane) {
#pragma unroll
    for (int kk = 0; kk < kHd / 16; ++kk) {
        std::uint32_t a[4];
        row_fragment<kLd>(a, rows, kk, lane);
        fragment_times_cols<T, kLd, kQueries>(acc, a, cols, kk, lane);
    }
}

// rows_times_cols with the rows' A fragments of every head-dim step held in registers.
template <class T, int kHd, int kLd, int kQueries>
__device__ __forceinline__ void fragments_times_cols(float (&acc)[kQueries / 8][4], const std::uint32_t (&a)[kHd / 16][4],
                                                     const T* cols, int lane) {
#pragma unroll
    for (int kk = 0; kk < kHd / 16; ++kk) fragment_times_cols<T, kLd, kQueries>(acc, a[kk], cols, kk, lane);
}

// acc[16 × kHd] += x[16 × kQueries] · tile[kQueries × kHd], x given as the accumulators of a
// rows_times_cols (the warp's 16 rows by the queries), tile = a [kQueries][kLd] tile as stored.
template <class T, int kHd, int kLd, int kQueries>
__device__ __forceinline__ void accumulate_times_tile(float (&acc)[kHd / 8][4], const float (&x)[kQueries / 8][4],
                                                      const T* tile, int lane) {
    const int matrix = lane / 8, matrix_row = lane % 8;
#pragma unroll
    for (int kk = 0; kk < kQueries / 16; ++kk) {
        const std::uint32_t a[4] = {pack(x[2 * kk][0], x[2 * kk][1], T{}), pack(x[2 * kk][2], x[2 * kk][3], T{}),
                                    pack(x[2 * kk + 1][0], x[2 * kk + 1][1], T{}),
                                    pack(x[2 * kk + 1][2], x[2 * kk + 1][3], T{})};
#pragma unroll
        for (int n2 = 0; n2 < kHd / 16; ++n2) {
            std::uint32_t bf[4];
            ldmatrix_x4_trans(bf, &tile[(kk * 16 + (matrix % 2) * 8 + matrix_row) * kLd + n2 * 16 + (matrix / 2) * 8]);
            mma_16816<T>(acc[2 * n2], a, bf[0], bf[1]);
            mma_16816<T>(acc[2 * n2 + 1], a, bf[2], bf[3]);
        }
    }
}

// Grid: one dimension, the key blocks of each (batch, head) side by side (block x: head
// x / key_blocks, keys kKeys·(x % key_blocks)..), so the blocks running at once share a few heads' Q,
// dO and dQ accumulator in L2 instead of each bringing its own from DRAM; within a head the first
// keys, which the most queries see, first. qkv is packed as `heads` says (the block's k and v
// are its q head's group's); the sequences lie in the rows as `spans` says, and dq_acc [rows, c]
// fp32 gets this block's share of dQ / scale; the q head's dK and dV go to dkv, row r's at dkv +
// r·ld_dkv + h·hd and c further on; lse and delta as the CUDA-core kernel's (lse [batch·n_head,
// spans.seq], delta [n_head, rows]). Shared memory: shared_bytes. kDropout: the form
// that draws dropout factors (one per probability, inline in the unrolled loop), kept apart so
// that the form without dropout holds none of the generator's code or registers. kQueries: the
// query tile, 64 or 32 (half the registers for Sᵀ and dPᵀ, so more blocks fit an SM);
// kMinBlocks: the blocks per SM the registers are budgeted for. kKvInRegisters: the warp's K and
// V rows as A fragments in registers for the whole kernel instead of read per tile.
template <class T, int kHd, bool kDropout, int kQueries, int kWarps, int kMinBlocks, bool kKvInRegisters>
__global__ void __launch_bounds__(kWarps * kWarp, kMinBlocks)
    flash_attention_backward_mma_kernel(float* dq_acc, T* dkv, std::int64_t ld_dkv, const T* dout, const T* qkv,
                                        const float* lse, const float* delta, SequenceSpans spans, std::int64_t rows,
                                        QkvHeads heads, float scale_log2, Dropout dropout, std::uint32_t site) {
    static_assert(kHd % 16 == 0 && kHd <= 128, "head dims that are multiples of 16, up to 128");
    static_assert(kQueries == 64 || kQueries == 32, "query tiles of 64 or 32");
    constexpr int kThreads = kWarps * kWarp, kKeys = kWarps * kKeysPerWarp;
    constexpr int kLd = kHd + kPad;
    constexpr int kLdS = kQueries + kPad;  // a row of dSᵀ in shared memory
    extern __shared__ __align__(16) unsigned char shared_raw[];
    T* const k_s = reinterpret_cast<T*>(shared_raw);
    T* const v_s = k_s + kKeys * kLd;
    T* const stages = v_s + kKeys * kLd;  // stage i: Q at i·stage_elems, dO after it
    T* const ds_s = stages + 2 * stage_elems<kHd, kQueries>();  // dSᵀ [kKeys][kLdS], as T (what the products read too)
    float* const stats = reinterpret_cast<float*>(ds_s + kKeys * kLdS);  // stage i: lse, D

    const int c = heads.c();
    const BackwardBlock block(kKeys, spans, heads);
    const int h = block.h, key0 = block.key0, seq = block.seq;
    if (key0 >= seq) return;  // a key block past a shorter sequence's end
    const auto [row0, qkv_b, q_g, do_g, stat0, delta_b] = block.rows(kHd, qkv, dout, delta, spans, rows, heads);
    const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
    const int group = lane / 4, pair = (lane % 4) * 2;
    const int matrix = lane / 8, matrix_row = lane % 8;
    const std::int64_t ld_qkv = heads.ld();
    const std::int64_t head = static_cast<std::int64_t>(h) * kHd;
    const int warp_key0 = key0 + warp * kKeysPerWarp;
    const int keys[2] = {warp_key0 + group, warp_key0 + group + 8};

    // The query tile q0 into `stage`: Q, dO, lse and D, as one group of copies.
    const auto load_queries = [&](int q0, int stage) {
        T* const q_s = stages + stage * stage_elems<kHd, kQueries>();
        load_tile<T, kHd, kLd, kThreads>(q_s, q_g, ld_qkv, q0, kQueries, seq, tid);
        load_tile<T, kHd, kLd, kThreads>(q_s + kQueries * kLd, do_g, c, q0, kQueries, seq, tid);
        if (tid < 2 * kQueries) {
            const int i = tid % kQueries;
            const bool valid = q0 + i < seq;
            const float* src = tid < kQueries ? lse + (valid ? stat0 + q0 + i : 0) : delta_b + (valid ? q0 + i : 0);
            cp_async_4(stats + stage * 2 * kQueries + tid, src, valid);
        }
        cp_async_commit();
    };
    load_tile<T, kHd, kLd, kThreads>(k_s, qkv_b + heads.k_col(h), ld_qkv, key0, kKeys, seq, tid);
    load_tile<T, kHd, kLd, kThreads>(v_s, qkv_b + heads.v_col(h), ld_qkv, key0, kKeys, seq, tid);
    load_queries(key0, 0);

    std::uint32_t k_frag[kKvInRegisters ? kHd / 16 : 1][4], v_frag[kKvInRegisters ? kHd / 16 : 1][4];
    if constexpr (kKvInRegisters) {
        cp_async_wait<0>();
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < kHd / 16; ++kk) row_fragment<kLd>(k_frag[kk], k_s + warp * kKeysPerWarp * kLd, kk, lane);
#pragma unroll
        for (int kk = 0; kk < kHd / 16; ++kk) row_fragment<kLd>(v_frag[kk], v_s + warp * kKeysPerWarp * kLd, kk, lane);
    }
    float dv[kHd / 8][4] = {}, dk[kHd / 8][4] = {};
    for (int q0 = key0, stage = 0; q0 < seq; q0 += kQueries, stage ^= 1) {
        cp_async_wait<0>();
        __syncthreads();  // this tile is here for every warp; the other stage and dSᵀ are free
        if (q0 + kQueries < seq) load_queries(q0 + kQueries, stage ^ 1);
        T* const q_s = stages + stage * stage_elems<kHd, kQueries>();
        const T* const do_s = q_s + kQueries * kLd;
        const float* const lse_s = stats + stage * 2 * kQueries;
        const float* const delta_s = lse_s + kQueries;
        T* const ds_rows = ds_s + (warp * kKeysPerWarp + group) * kLdS;

        if (warp_key0 < min(q0 + kQueries, seq)) {  // some of the warp's keys see some query of the tile
            float s[kQueries / 8][4] = {}, dp[kQueries / 8][4] = {};
            if constexpr (kKvInRegisters) {
                fragments_times_cols<T, kHd, kLd, kQueries>(s, k_frag, q_s, lane);
                fragments_times_cols<T, kHd, kLd, kQueries>(dp, v_frag, do_s, lane);
            } else {
                rows_times_cols<T, kHd, kLd, kQueries>(s, k_s + warp * kKeysPerWarp * kLd, q_s, lane);
                rows_times_cols<T, kHd, kLd, kQueries>(dp, v_s + warp * kKeysPerWarp * kLd, do_s, lane);
            }

            // s becomes Aᵀ = Pᵀ∘f and dp becomes dSᵀ. Element e of n-tile j: key keys[e / 2], query
            // q0 + 8j + pair + e % 2. Only the diagonal tiles and a tile past seq mask anything.
            const bool edge = q0 < key0 + kKeys || q0 + kQueries > seq;
#pragma unroll
            for (int j = 0; j < kQueries / 8; ++j) {
                // The lane's two queries' lse and D, one 8-byte read each.
                const float2 lse2 = *reinterpret_cast<const float2*>(lse_s + j * 8 + pair);
                const float2 delta2 = *reinterpret_cast<const float2*>(delta_s + j * 8 + pair);
                const float neg_lse_log2[2] = {-lse2.x * kLog2e, -lse2.y * kLog2e};
                const float d[2] = {delta2.x, delta2.y};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int query = q0 + j * 8 + pair + e % 2, key = keys[e / 2];
                    float p = exp2f(fmaf(s[j][e], scale_log2, neg_lse_log2[e % 2]));
                    if (edge && (key > query || query >= seq)) p = 0.0f;
                    float f = 1.0f;
                    if (kDropout && p != 0.0f)
                        f = dropout.probability_factor(site, static_cast<std::uint64_t>(stat0 + query),
                                                       static_cast<std::uint64_t>(key));
                    dp[j][e] = p * (dp[j][e] * f - d[e % 2]);
                    s[j][e] = p * f;
                }
            }

#pragma unroll
            for (int j = 0; j < kQueries / 8; ++j) {
                *reinterpret_cast<std::uint32_t*>(ds_rows + j * 8 + pair) = pack(dp[j][0], dp[j][1], T{});
                *reinterpret_cast<std::uint32_t*>(ds_rows + 8 * kLdS + j * 8 + pair) = pack(dp[j][2], dp[j][3], T{});
            }
            accumulate_times_tile<T, kHd, kLd, kQueries>(dv, s, do_s, lane);
            accumulate_times_tile<T, kHd, kLd, kQueries>(dk, dp, q_s, lane);
        } else {
#pragma unroll
            for (int j = 0; j < kQueries / 8; ++j) {
                *reinterpret_cast<std::uint32_t*>(ds_rows + j * 8 + pair) = 0;
                *reinterpret_cast<std::uint32_t*>(ds_rows + 8 * kLdS + j * 8 + pair) = 0;
            }
        }
        __syncthreads();  // every warp's dSᵀ is stored

        // dQ [kQueries × kHd] += dS·K, each warp 16 queries and kHd / kParts columns: A = dS
        // [16 queries × 64 keys] from dSᵀ by ldmatrix.trans, matrices (queries 8·(m % 2).., keys
        // 16·kk + 8·(m / 2)); B = K [keys × d] by ldmatrix.trans as the forward reads V.
        constexpr int kRowGroups = kQueries / 16, kParts = kWarps / kRowGroups;
        static_assert(kHd % (16 * kParts) == 0, "whole 16-column steps per warp");
        const int warp_q = (warp % kRowGroups) * 16;
        std::uint32_t a[kKeys / 16][4];
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
            ldmatrix_x4_trans(a[kk], &ds_s[(kk * 16 + (matrix / 2) * 8 + matrix_row) * kLdS + warp_q + (matrix % 2) * 8]);
        }
        const int q_rows[2] = {q0 + warp_q + group, q0 + warp_q + group + 8};
#pragma unroll
        for (int step = 0; step < kHd / 16 / kParts; ++step) {
            const int n2 = (warp / kRowGroups) * (kHd / 16 / kParts) + step;
            float acc[2][4] = {};
#pragma unroll
            for (int kk = 0; kk < kKeys / 16; ++kk) {
                std::uint32_t bf[4];
                ldmatrix_x4_trans(bf, &k_s[(kk * 16 + (matrix % 2) * 8 + matrix_row) * kLd + n2 * 16 + (matrix / 2) * 8]);
                mma_16816<T>(acc[0], a[kk], bf[0], bf[1]);
                mma_16816<T>(acc[1], a[kk], bf[2], bf[3]);
            }
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                if (q_rows[r] >= seq) continue;
                float* dq_row = dq_acc + (row0 + q_rows[r]) * c + head + n2 * 16 + pair;
                atomicAdd(reinterpret_cast<float2*>(dq_row), make_float2(acc[0][2 * r], acc[0][2 * r + 1]));
                atomicAdd(reinterpret_cast<float2*>(dq_row + 8), make_float2(acc[1][2 * r], acc[1][2 * r + 1]));
            }
        }
    }

    // dK = scale·dSᵀ·Q (scale = scale_log2 / log2(e)) and dV, two elements per 32-bit store.
    const float scale = scale_log2 * kLn2;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (keys[r] >= seq) continue;
        T* row = dkv + (row0 + keys[r]) * ld_dkv + head;
#pragma unroll
        for (int n = 0; n < kHd / 8; ++n) {
            *reinterpret_cast<std::uint32_t*>(row + n * 8 + pair) =
                pack(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale, T{});
            *reinterpret_cast<std::uint32_t*>(row + c + n * 8 + pair) = pack(dv[n][2 * r], dv[n][2 * r + 1], T{});
        }
    }
}

// The query tile, the blocks per SM and where K and V live for each head dim: query tiles of 32
// where the dQ step splits the head dim in whole 16-column steps (all but 80); up to head dim 64,
// K and V fragments in registers with registers budgeted for three blocks per SM, above it two
// blocks, which spill nothing at 96. The warps share the SM's shared-memory bandwidth and spilled
// registers go through the same unit, so fewer blocks without per-tile K and V reads or large
// spills ran faster on an H100 than more blocks with them, and two blocks at head dim 64 slower
// than three (docs/benchmarks-history.md, "Attention backward's kernel").
template <int kHd>
struct Tuning {
    static_assert(kHd <= 96, "head dim 128 takes the two-dimensional form");
    static constexpr int kQueries = kHd % 32 == 0 ? 32 : 64;
    static constexpr int kWarps = 4;
    static constexpr int kMinBlocks = kHd % 32 != 0 ? 2 : kHd <= 64 ? 3 : 2;
    static constexpr bool kKvInRegisters = kHd <= 64;
};

// The kernel of (T, kHd, kDropout) with its tuning, and the shared memory it launches with.
template <class T, int kHd, bool kDropout>
constexpr auto tuned_kernel =
    flash_attention_backward_mma_kernel<T, kHd, kDropout, Tuning<kHd>::kQueries, Tuning<kHd>::kWarps,
                                        Tuning<kHd>::kMinBlocks, Tuning<kHd>::kKvInRegisters>;
template <class T, int kHd>
constexpr std::size_t tuned_shared_bytes = shared_bytes<T, kHd, Tuning<kHd>::kQueries, Tuning<kHd>::kWarps>();

}  // namespace sweetspot::gpu::backward_mma
