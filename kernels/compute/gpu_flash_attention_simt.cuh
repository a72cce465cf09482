#pragma once
// The register-tiled CUDA-core form of the flash_attention kernel: every dtype at the head dims up
// to 256 that the tensor-core forms do not take (gpu_flash_attention.cu lists them). Included by gpu_flash_attention.cu only.
//
// A block is 128 threads and 64 query rows of one (batch, head). The threads form an 8 × 16 grid;
// thread (ty, tx) owns query rows 8ty .. 8ty + 7 of the block, and per tile of 64 keys:
//   S = Q·Kᵀ     the scores of keys tx, tx + 16, tx + 32 and tx + 48: an 8 × 4 register tile, as an
//                SGEMM keeps one. Each step of four d is twelve 16-byte loads for 128 multiply-
//                adds (a 4 × 4 tile needs twice the loads per multiply-add, and then shared
//                memory, not the FMA units, sets the pace).
//   softmax      online, in base 2. A row's 64 scores are spread over the 16 threads of a
//                half-warp, so its max is four shuffles; each thread keeps a partial row sum,
//                added up once at the end.
//   O += P·V     output columns 64g + 4tx .. 64g + 4tx + 3 for each group g of 64 columns: an
//                8 × 4·kGroups register tile. The probabilities cross from the threads that own
//                a key to those that own an output column through shared memory, in the place
//                K had (its scores are taken by then), so two blocks fit an SM at head dim 128.
// Q, K and V stay row-major as in memory, so fp32 at head dims that are multiples of 4 copies
// them with cp.async: V's copy runs while S is computed. Rows of Q and K are padded to an odd
// number of 16-byte units, so the 16 rows a half-warp reads start in different banks; P's rows
// are 68 floats for the same reason.
#include <cstddef>
#include <cstdint>

#include "kernels/compute/device_common.cuh"
#include "kernels/compute/qkv_heads.hpp"
#include "kernels/compute/sequence_spans.hpp"
#include "kernels/compute/dropout.hpp"
#include "kernels/compute/gpu_flash_attention_logsumexp.cuh"

namespace sweetspot::gpu::simt {

constexpr int kRows = 64;                     // query rows per block
constexpr int kKeys = 64;                     // keys per tile
constexpr int kKeyGroups = 16;                // threads across a tile's keys (a half-warp: a row's scores)
constexpr int kRowGroups = 8;                 // threads across the block's rows
constexpr int kThreads = kKeyGroups * kRowGroups;
constexpr int kRowsPer = kRows / kRowGroups;  // query rows per thread
constexpr int kKeysPer = kKeys / kKeyGroups;  // keys per thread, and output columns per group
constexpr int kLdP = kKeys + 4;               // padded row of P
constexpr int kMaxHeadDim = 256;              // four groups of 64 output columns per thread

// Groups of 64 output columns a thread's tile covers at head dim `hd`.
__host__ __device__ constexpr int groups_for(int hd) { return (hd + 63) / 64; }

// Row of Q and K in shared memory, in floats: hd rounded up to 16 bytes (zeros past hd, so the
// steps of four d need no tail), then to an odd number of 16-byte units.
__host__ __device__ constexpr int row_floats(int hd) {
    const int units = (hd + 3) / 4;
    return 4 * (units % 2 == 0 ? units + 1 : units);
}

// Shared memory of a block, in bytes: Q [kRows][row]; K [kKeys][row], which becomes P
// [kRows][kLdP] once the scores are taken (so at least that); V [kKeys][64·groups], zeros past hd.
inline std::size_t shared_bytes(int hd) {
    const int row = row_floats(hd);
    const int k_floats = kKeys * (row > kLdP ? row : kLdP);
    return sizeof(float) * (static_cast<std::size_t>(kRows) * row + static_cast<std::size_t>(k_floats) +
                            static_cast<std::size_t>(kKeys) * 64 * static_cast<std::size_t>(groups_for(hd)));
}

// Over the 16 lanes of a half-warp (lanes that differ in the lowest four bits).
__device__ __forceinline__ float half_warp_max(float v) {
    for (int offset = kKeyGroups / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
    return v;
}
__device__ __forceinline__ float half_warp_sum(float v) {
    for (int offset = kKeyGroups / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    return v;
}

// Rows row0 .. row0 + rows − 1 of one head's Q, K or V into shared memory rows of `ld` floats,
// zeros past seq. kAsync: fp32 at a head dim that is a multiple of 4, 16 bytes per cp.async (the
// caller commits and waits); otherwise loads that convert to fp32 and also write the zeros from
// hd to the end of each row (V's columns past hd are zeroed once, before the first tile).
template <bool kAsync, class T>
__device__ __forceinline__ void load_rows(float* dst, int ld, int ld_pad, const T* src, std::int64_t ld_src, int row0,
                                          int rows, int seq, int hd, int tid) {
    if constexpr (kAsync) {
        const int chunks = hd / 4;
        for (int i = tid; i < rows * chunks; i += kThreads) {
            const int r = i / chunks, d = (i % chunks) * 4;
            const bool valid = row0 + r < seq;
            cp_async_16(dst + r * ld + d, src + (valid ? (row0 + r) * ld_src + d : 0), valid);
        }
    } else {
        for (int r = tid / kKeyGroups; r < rows; r += kRowGroups) {
            const bool valid = row0 + r < seq;
            for (int d = tid % kKeyGroups; d < ld_pad; d += kKeyGroups)
                dst[r * ld + d] = valid && d < hd ? to_f32(src[(row0 + r) * ld_src + d]) : 0.0f;
        }
    }
}

// Grid: x = batch · n_head, y = blocks of 64 query rows (the last rows, which see the most keys,
// first). scale_log2 = log2(e) / sqrt(hd), applied to the scores.
// Two blocks per SM up to head dim 128 (shared memory allows no more); one above, where the wider
// output tile may take every register.
template <class T, int kGroups, bool kAsync>
__global__ void __launch_bounds__(kThreads, kGroups <= 2 ? 2 : 1)
    flash_attention_simt_kernel(T* out, float* lse, const T* qkv, SequenceSpans spans, QkvHeads heads, float scale_log2,
                                Dropout dropout, std::uint32_t site) {
    const int c = heads.c(), n_head = heads.n_head;
    static_assert(!kAsync || sizeof(T) == sizeof(float), "cp.async copies fp32 as it is");
    constexpr int kLdV = 64 * kGroups;
    extern __shared__ float4 shared_f4[];
    const int hd = heads.head_dim;
    const int ld = row_floats(hd);
    const int hd4 = (hd + 3) / 4 * 4;  // the d the score loop runs over
    float* const q_s = reinterpret_cast<float*>(shared_f4);  // [kRows][ld]
    float* const k_s = q_s + kRows * ld;                      // [kKeys][ld]
    float* const p_s = k_s;                                   // [kRows][kLdP], after the scores
    float* const v_s = k_s + kKeys * max(ld, kLdP);           // [kKeys][kLdV]

    const int bh = static_cast<int>(blockIdx.x);
    const int b = bh / n_head, h = bh % n_head;
    const int row0 = static_cast<int>(gridDim.y - 1 - blockIdx.y) * kRows;
    const int seq = spans.length(b);  // this sequence's positions
    if (row0 >= seq) return;          // a row block past a shorter sequence's end
    const int tid = static_cast<int>(threadIdx.x), ty = tid / kKeyGroups, tx = tid % kKeyGroups;
    const std::int64_t ld_qkv = heads.ld();
    const T* qkv_b = qkv + spans.first_row(b) * ld_qkv;
    const T* q_g = qkv_b + heads.q_col(h);
    const T* k_g = qkv_b + heads.k_col(h);
    const T* v_g = qkv_b + heads.v_col(h);

    for (int i = tid; i < kKeys * kLdV; i += kThreads) v_s[i] = 0.0f;  // the columns past hd stay zero
    load_rows<kAsync>(q_s, ld, hd4, q_g, ld_qkv, row0, kRows, seq, hd, tid);

    float o[kRowsPer][kKeysPer * kGroups] = {};
    float row_max[kRowsPer], row_sum[kRowsPer];
#pragma unroll
    for (int i = 0; i < kRowsPer; ++i) {
        row_max[i] = -INFINITY;
        row_sum[i] = 0.0f;
    }
    const int last = min(row0 + kRows, seq) - 1;  // the block's last query sees keys 0 .. last
    for (int k0 = 0; k0 <= last; k0 += kKeys) {
        __syncthreads();  // the previous tile's P and V are read (and V's zeros are stored)
        // K first, then V in its own group, which may still be arriving while S is computed.
        load_rows<kAsync>(k_s, ld, hd4, k_g, ld_qkv, k0, kKeys, seq, hd, tid);
        if constexpr (kAsync) cp_async_commit();
        load_rows<kAsync>(v_s, kLdV, hd, v_g, ld_qkv, k0, kKeys, seq, hd, tid);
        if constexpr (kAsync) {
            cp_async_commit();
            cp_async_wait<1>();  // Q (with the first tile's K) and K are here
        }
        __syncthreads();

        float s[kRowsPer][kKeysPer] = {};
        const float* q_row = q_s + kRowsPer * ty * ld;
        const float* k_row = k_s + tx * ld;
#pragma unroll 2
        for (int d = 0; d < hd4; d += 4) {
            float4 q[kRowsPer], k[kKeysPer];
#pragma unroll
            for (int i = 0; i < kRowsPer; ++i) q[i] = *reinterpret_cast<const float4*>(q_row + i * ld + d);
#pragma unroll
            for (int j = 0; j < kKeysPer; ++j) k[j] = *reinterpret_cast<const float4*>(k_row + j * kKeyGroups * ld + d);
#pragma unroll
            for (int i = 0; i < kRowsPer; ++i) {
#pragma unroll
                for (int j = 0; j < kKeysPer; ++j) {
                    s[i][j] = fmaf(q[i].x, k[j].x, s[i][j]);
                    s[i][j] = fmaf(q[i].y, k[j].y, s[i][j]);
                    s[i][j] = fmaf(q[i].z, k[j].z, s[i][j]);
                    s[i][j] = fmaf(q[i].w, k[j].w, s[i][j]);
                }
            }
        }

        // The causal mask (only a tile that reaches past the block's first row has masked keys),
        // then the online softmax.
        const bool diagonal = k0 + kKeys - 1 > row0;
#pragma unroll
        for (int i = 0; i < kRowsPer; ++i) {
            const int t = row0 + kRowsPer * ty + i;
            float tile_max = -INFINITY;
#pragma unroll
            for (int j = 0; j < kKeysPer; ++j) {
                s[i][j] *= scale_log2;
                if (diagonal && k0 + tx + kKeyGroups * j > t) s[i][j] = -INFINITY;
                tile_max = fmaxf(tile_max, s[i][j]);
            }
            const float new_max = fmaxf(row_max[i], half_warp_max(tile_max));
            const float rescale = row_max[i] == -INFINITY ? 0.0f : exp2f(row_max[i] - new_max);
            row_max[i] = new_max;
            float tile_sum = 0.0f;
#pragma unroll
            for (int j = 0; j < kKeysPer; ++j) {
                s[i][j] = s[i][j] == -INFINITY ? 0.0f : exp2f(s[i][j] - new_max);
                tile_sum += s[i][j];
            }
            row_sum[i] = row_sum[i] * rescale + tile_sum;
#pragma unroll
            for (int n = 0; n < kKeysPer * kGroups; ++n) o[i][n] *= rescale;
        }

        __syncthreads();  // every thread's scores are taken: K's place takes P
#pragma unroll
        for (int i = 0; i < kRowsPer; ++i) {
#pragma unroll
            for (int j = 0; j < kKeysPer; ++j) p_s[(kRowsPer * ty + i) * kLdP + tx + kKeyGroups * j] = s[i][j];
        }
        if (dropout.active()) {
            // The factor scales the numerator only (O = Σ p·f·v / Σ p), applied to the thread's
            // own probabilities in shared memory in a loop that is not unrolled: one copy of the
            // generator's code instead of 32, and no registers held for it.
#pragma unroll 1
            for (int e = 0; e < kRowsPer * kKeysPer; ++e) {
                const int i = e / kKeysPer, key = tx + kKeyGroups * (e % kKeysPer);
                float& p = p_s[(kRowsPer * ty + i) * kLdP + key];
                const auto prob_row = static_cast<std::uint64_t>(bh) * static_cast<std::uint64_t>(spans.seq) +
                                      static_cast<std::uint64_t>(row0 + kRowsPer * ty + i);
                if (p != 0.0f) p *= dropout.probability_factor(site, prob_row, static_cast<std::uint64_t>(k0 + key));
            }
        }
        if constexpr (kAsync) cp_async_wait<0>();  // V is here
        __syncthreads();

        const float* p_rows = p_s + kRowsPer * ty * kLdP;
        const float* v_cols = v_s + kKeysPer * tx;
#pragma unroll 2
        for (int k = 0; k < kKeys; k += 4) {
            float4 p[kRowsPer];
#pragma unroll
            for (int i = 0; i < kRowsPer; ++i) p[i] = *reinterpret_cast<const float4*>(p_rows + i * kLdP + k);
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
                for (int g = 0; g < kGroups; ++g) {
                    const float4 v4 = *reinterpret_cast<const float4*>(v_cols + (k + kk) * kLdV + 64 * g);
                    const float v[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
                    for (int i = 0; i < kRowsPer; ++i) {
                        const float pk = kk == 0 ? p[i].x : kk == 1 ? p[i].y : kk == 2 ? p[i].z : p[i].w;
#pragma unroll
                        for (int e = 0; e < 4; ++e) o[i][4 * g + e] = fmaf(pk, v[e], o[i][4 * g + e]);
                    }
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < kRowsPer; ++i) {
        const float sum = half_warp_sum(row_sum[i]);  // every lane takes part, rows past seq too
        const int t = row0 + kRowsPer * ty + i;
        if (t >= seq) continue;
        if (lse != nullptr && tx == 0)
            lse[static_cast<std::int64_t>(bh) * spans.seq + t] = logsumexp_from_base2(row_max[i], sum);
        const float inv = 1.0f / sum;
        T* o_g = out + (spans.first_row(b) + t) * c + static_cast<std::int64_t>(h) * hd;
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = 64 * g + kKeysPer * tx + e;
                if (col < hd) o_g[col] = from_f32<T>(o[i][4 * g + e] * inv);
            }
        }
    }
}

}  // namespace sweetspot::gpu::simt
