#pragma once
// The register-tiled CUDA-core form of the flash_attention kernel: fp32 (whose tensor-core forms
// round the operands below fp32's precision) at every head dim up to 256, and fp16 / bf16 at the
// head dims the tensor-core form does not take. Included by gpu_flash_attention.cu only.
//
// A block is 256 threads and 64 query rows of one (batch, head). The threads form a 16 × 16 grid;
// thread (ty, tx) owns query rows 4ty .. 4ty + 3 of the block, and per tile of 64 keys:
//   S = Q·Kᵀ     the scores of keys 4tx .. 4tx + 3: a 4 × 4 register tile, as an SGEMM keeps one.
//                Q and K sit transposed in shared memory ([d][row]), so each step over d is two
//                16-byte loads for 16 multiply-adds.
//   softmax      online, in base 2. A row's 64 scores are spread over the 16 threads of a
//                half-warp, so its max is four shuffles; each thread keeps a partial row sum,
//                added up once at the end.
//   O += P·V     output columns 64g + 4tx .. 64g + 4tx + 3 for each group g of 64 columns: a
//                4 × 4·kGroups register tile. The probabilities cross from the threads that own
//                a key to those that own an output column through shared memory, in the place
//                K had (its scores are taken by then), so two blocks fit an SM at head dim 128.
// Rows of Q, K and P in shared memory are padded to 68 floats, so that the 16-byte loads of a
// half-warp fall in different banks.
#include <cstddef>
#include <cstdint>

#include "kernels/compute/device_common.cuh"
#include "kernels/compute/dropout.hpp"

namespace sweetspot::gpu::simt {

constexpr int kRows = 64;  // query rows per block
constexpr int kKeys = 64;  // keys per tile
constexpr int kSide = 16;  // the threads' grid is kSide × kSide
constexpr int kThreads = kSide * kSide;
constexpr int kPer = kRows / kSide;  // rows and keys per thread
constexpr int kLd = kKeys + 4;       // padded row of Q and K (transposed) and of P
constexpr int kMaxHeadDim = 256;     // four groups of 64 output columns per thread

// Groups of 64 output columns a thread's tile covers at head dim `hd`.
constexpr int groups_for(int hd) { return (hd + 63) / 64; }

// Shared memory of a block, in bytes: Q transposed [hd][kLd]; K transposed [max(hd, kRows)][kLd],
// which becomes P [kRows][kLd] once the scores are taken; V [kKeys][64·groups], zero past hd.
inline std::size_t shared_bytes(int hd) {
    const auto rows_k = static_cast<std::size_t>(hd > kRows ? hd : kRows);
    return sizeof(float) * (static_cast<std::size_t>(hd) * kLd + rows_k * kLd +
                            static_cast<std::size_t>(kKeys) * 64 * static_cast<std::size_t>(groups_for(hd)));
}

// Over the 16 lanes of a half-warp (lanes that differ in the lowest four bits).
__device__ __forceinline__ float half_warp_max(float v) {
    for (int offset = kSide / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
    return v;
}
__device__ __forceinline__ float half_warp_sum(float v) {
    for (int offset = kSide / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
    return v;
}

// Grid: x = batch · n_head, y = blocks of 64 query rows (the last rows, which see the most keys,
// first). scale_log2 = log2(e) / sqrt(hd), folded into Q as it is stored.
// Two blocks per SM up to head dim 128 (shared memory allows no more); one above, where the wider
// output tile may take every register.
template <class T, int kGroups>
__global__ void __launch_bounds__(kThreads, kGroups <= 2 ? 2 : 1)
    flash_attention_simt_kernel(T* out, const T* qkv, int seq, int c, int n_head, float scale_log2, Dropout dropout,
                                std::uint32_t site) {
    constexpr int kLdV = 64 * kGroups;
    extern __shared__ float4 shared_f4[];
    const int hd = c / n_head;
    float* const q_s = reinterpret_cast<float*>(shared_f4);  // [hd][kLd]
    float* const k_s = q_s + hd * kLd;                        // [max(hd, kRows)][kLd]
    float* const p_s = k_s;                                   // [kRows][kLd], after the scores
    float* const v_s = k_s + max(hd, kRows) * kLd;            // [kKeys][kLdV]

    const int bh = static_cast<int>(blockIdx.x);
    const int b = bh / n_head, h = bh % n_head;
    const int row0 = static_cast<int>(gridDim.y - 1 - blockIdx.y) * kRows;
    const int tid = static_cast<int>(threadIdx.x), ty = tid / kSide, tx = tid % kSide;
    const std::int64_t ld_qkv = 3 * static_cast<std::int64_t>(c);
    const T* q_g = qkv + static_cast<std::int64_t>(b) * seq * ld_qkv + static_cast<std::int64_t>(h) * hd;
    const T* k_g = q_g + c;
    const T* v_g = q_g + 2 * c;

    // A half-warp reads a row's consecutive d (coalesced) and the 16 half-warps take rows in turn,
    // with no division by the runtime head dim.
    for (int r = ty; r < kRows; r += kSide) {
        const int pos = row0 + r;
        for (int d = tx; d < hd; d += kSide)
            q_s[d * kLd + r] = pos < seq ? to_f32(q_g[pos * ld_qkv + d]) * scale_log2 : 0.0f;
    }
    for (int i = tid; i < kKeys * kLdV; i += kThreads) v_s[i] = 0.0f;  // the columns past hd stay zero

    float o[kPer][4 * kGroups] = {};
    float row_max[kPer], row_sum[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        row_max[i] = -INFINITY;
        row_sum[i] = 0.0f;
    }
    const int last = min(row0 + kRows, seq) - 1;  // the block's last query sees keys 0 .. last
    for (int k0 = 0; k0 <= last; k0 += kKeys) {
        __syncthreads();  // the previous tile's P and V are read (and Q and V's zeros are stored)
        for (int r = ty; r < kKeys; r += kSide) {
            const int pos = k0 + r;
            const bool valid = pos < seq;
            for (int d = tx; d < hd; d += kSide) {
                k_s[d * kLd + r] = valid ? to_f32(k_g[pos * ld_qkv + d]) : 0.0f;
                v_s[r * kLdV + d] = valid ? to_f32(v_g[pos * ld_qkv + d]) : 0.0f;
            }
        }
        __syncthreads();

        float s[kPer][kPer] = {};
        const float* q_col = q_s + kPer * ty;
        const float* k_col = k_s + kPer * tx;
#pragma unroll 4
        for (int d = 0; d < hd; ++d) {
            const float4 q = *reinterpret_cast<const float4*>(q_col + d * kLd);
            const float4 k = *reinterpret_cast<const float4*>(k_col + d * kLd);
            const float qv[kPer] = {q.x, q.y, q.z, q.w}, kv[kPer] = {k.x, k.y, k.z, k.w};
#pragma unroll
            for (int i = 0; i < kPer; ++i) {
#pragma unroll
                for (int j = 0; j < kPer; ++j) s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
            }
        }

        // The causal mask (only a tile that reaches past the block's first row has masked keys),
        // then the online softmax.
        const bool diagonal = k0 + kKeys - 1 > row0;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
            const int t = row0 + kPer * ty + i;
            float tile_max = -INFINITY;
#pragma unroll
            for (int j = 0; j < kPer; ++j) {
                if (diagonal && k0 + kPer * tx + j > t) s[i][j] = -INFINITY;
                tile_max = fmaxf(tile_max, s[i][j]);
            }
            const float new_max = fmaxf(row_max[i], half_warp_max(tile_max));
            const float rescale = row_max[i] == -INFINITY ? 0.0f : exp2f(row_max[i] - new_max);
            row_max[i] = new_max;
            float tile_sum = 0.0f;
#pragma unroll
            for (int j = 0; j < kPer; ++j) {
                s[i][j] = s[i][j] == -INFINITY ? 0.0f : exp2f(s[i][j] - new_max);
                tile_sum += s[i][j];
            }
            row_sum[i] = row_sum[i] * rescale + tile_sum;
#pragma unroll
            for (int n = 0; n < 4 * kGroups; ++n) o[i][n] *= rescale;
        }

        __syncthreads();  // every thread's scores are taken: K's place takes P
#pragma unroll
        for (int i = 0; i < kPer; ++i)
            *reinterpret_cast<float4*>(p_s + (kPer * ty + i) * kLd + kPer * tx) = make_float4(s[i][0], s[i][1], s[i][2], s[i][3]);
        if (dropout.active()) {
            // The factor scales the numerator only (O = Σ p·f·v / Σ p), applied to the thread's
            // own probabilities in shared memory in a loop that is not unrolled: one copy of the
            // generator's code instead of sixteen, and no registers held for it.
#pragma unroll 1
            for (int e = 0; e < kPer * kPer; ++e) {
                const int i = e / kPer, j = e % kPer;
                float& p = p_s[(kPer * ty + i) * kLd + kPer * tx + j];
                const auto prob_row = static_cast<std::uint64_t>(bh) * static_cast<std::uint64_t>(seq) +
                                      static_cast<std::uint64_t>(row0 + kPer * ty + i);
                if (p != 0.0f) p *= dropout.probability_factor(site, prob_row, static_cast<std::uint64_t>(k0 + kPer * tx + j));
            }
        }
        __syncthreads();

        const float* p_rows = p_s + kPer * ty * kLd;
        const float* v_cols = v_s + kPer * tx;
#pragma unroll 2
        for (int k = 0; k < kKeys; k += 4) {
            float p[kPer][4];
#pragma unroll
            for (int i = 0; i < kPer; ++i) {
                const float4 p4 = *reinterpret_cast<const float4*>(p_rows + i * kLd + k);
                p[i][0] = p4.x;
                p[i][1] = p4.y;
                p[i][2] = p4.z;
                p[i][3] = p4.w;
            }
#pragma unroll
            for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
                for (int g = 0; g < kGroups; ++g) {
                    const float4 v4 = *reinterpret_cast<const float4*>(v_cols + (k + kk) * kLdV + 64 * g);
                    const float v[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
                    for (int i = 0; i < kPer; ++i) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) o[i][4 * g + e] = fmaf(p[i][kk], v[e], o[i][4 * g + e]);
                    }
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < kPer; ++i) {
        const float sum = half_warp_sum(row_sum[i]);  // every lane takes part, rows past seq too
        const int t = row0 + kPer * ty + i;
        if (t >= seq) continue;
        const float inv = 1.0f / sum;
        T* o_g = out + (static_cast<std::int64_t>(b) * seq + t) * c + static_cast<std::int64_t>(h) * hd;
#pragma unroll
        for (int g = 0; g < kGroups; ++g) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = 64 * g + kPer * tx + e;
                if (col < hd) o_g[col] = from_f32<T>(o[i][4 * g + e] * inv);
            }
        }
    }
}

}  // namespace sweetspot::gpu::simt
