#pragma once
// The tensor-core flash attention backward at head dim 128 for fp16 and bf16, with FlashAttention-2's
// two-dimensional split of each product over the warps. Included by gpu_flash_attention_backward.cu
// only; the other head dims take gpu_flash_attention_backward_mma.cuh, whose warps each own 16
// keys and every head-dim column of their dK and dV.
//
// Why a second form: at head dim 128 a warp that owns 16 keys reads the whole query tile's Q and
// dO from shared memory for 16 keys' worth of products, and shared memory, not the tensor cores,
// sets the pace. Here a block of 8 warps owns 128 keys and walks query tiles of 64, and each
// product gives every warp a 32 × 32 or 32 × 64 piece, so each fragment read from shared memory
// feeds two or more mma instructions:
//   S  = Q·Kᵀ, dP = dO·Vᵀ   [64 queries × 128 keys]: warp w the queries 32·(w / 4).., the keys
//                           32·(w % 4)..; P = exp2(S·log2(e)/sqrt(hd) − lse·log2(e)),
//                           dS = P∘(f∘dP − D), A = P∘f, both stored to shared memory [query][key];
//   dV += Aᵀ·dO, dK += dSᵀ·Q [128 keys × 128 dims]: warp w the keys 32·(w / 2).., the dims
//                           64·(w % 2)..: accumulators in registers for the whole kernel, Aᵀ and
//                           dSᵀ read by ldmatrix.trans;
//   dQ += dS·K              [64 queries × 128 dims]: warp w the queries 32·(w / 4).., the dims
//                           32·(w % 4)..; added to the fp32 accumulator, two floats per atomic.
// The price is A and dS through shared memory (the 16-key form keeps them in registers) and a
// barrier between the first product pair and the rest. Q, dO, lse and D come in two stages, as in
// the 16-key form; the grid, the masks, the dropout draws and the outputs are that form's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "kernels/compute/gpu_flash_attention_backward_block.cuh"
#include "kernels/compute/gpu_flash_attention_backward_mma.cuh"

namespace sweetspot::gpu::backward_mma_2d {

using mma::ldmatrix_x4;
using mma::ldmatrix_x4_trans;
using mma::mma_16816;
using mma::pack;

constexpr int kHd = 128;
constexpr int kWarps = 8;
constexpr int kKeys = 128;    // per block: kWarps × backward_mma::kKeysPerWarp, the grid's key blocks
constexpr int kQueries = 64;  // per tile
constexpr int kPad = 8;
constexpr int kLd = kHd + kPad;       // a row of K, V, Q, dO in shared memory
constexpr int kLdP = kKeys + kPad;    // a row of A and dS in shared memory
constexpr int kStageElems = 2 * kQueries * kLd;
static_assert(kKeys == kWarps * backward_mma::kKeysPerWarp, "the grid counts key blocks as the 16-key form does");

// K, V [kKeys][kLd], two stages of Q and dO [kQueries][kLd], A and dS [kQueries][kLdP], in T; two
// stages of lse and D [kQueries] in fp32.
template <class T>
constexpr std::size_t shared_bytes() {
    return (2 * static_cast<std::size_t>(kKeys) * kLd + 2 * static_cast<std::size_t>(kStageElems) +
            2 * static_cast<std::size_t>(kQueries) * kLdP) *
               sizeof(T) +
           2 * 2 * kQueries * sizeof(float);
}

// acc[2 m-tiles][kN / 8 n-tiles] += A[32 × 16·kSteps] · B[16·kSteps × kN], each fragment read
// from shared memory feeding two or more mma instructions. A is 32 rows of `a` (rows kLdA apart)
// as stored, or with kATransposed its transpose: `a` then holds the reduced index as its rows and
// A's rows as 32 of its columns (ldmatrix.trans). B is `b` (rows kLdB apart) with the reduced index
// as its rows and kN of its columns (ldmatrix.trans), or with kBAsRows kN rows of `b` with the
// reduced index along them (Bᵀ as stored, as Q·Kᵀ reads K).
template <class T, int kN, int kSteps, int kLdA, int kLdB, bool kATransposed, bool kBAsRows>
__device__ __forceinline__ void product(float (&acc)[2][kN / 8][4], const T* a, const T* b, int lane) {
    const int matrix = lane / 8, matrix_row = lane % 8;
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
        std::uint32_t af[2][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
            const int row = mi * 16 + (matrix % 2) * 8, step = kk * 16 + (matrix / 2) * 8;
            if constexpr (kATransposed)
                ldmatrix_x4_trans(af[mi], &a[(step + matrix_row) * kLdA + row]);
            else
                ldmatrix_x4(af[mi], &a[(row + matrix_row) * kLdA + step]);
        }
#pragma unroll
        for (int j = 0; j < kN / 8; j += 2) {
            // B of n-tiles j and j + 1: bf[0], bf[1] the reduced steps 0–7 and 8–15 of j, then j + 1's.
            std::uint32_t bf[4];
            if constexpr (kBAsRows)
                ldmatrix_x4(bf, &b[((j + matrix / 2) * 8 + matrix_row) * kLdB + kk * 16 + (matrix % 2) * 8]);
            else
                ldmatrix_x4_trans(bf, &b[(kk * 16 + (matrix % 2) * 8 + matrix_row) * kLdB + (j + matrix / 2) * 8]);
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
                mma_16816<T>(acc[mi][j], af[mi], bf[0], bf[1]);
                mma_16816<T>(acc[mi][j + 1], af[mi], bf[2], bf[3]);
            }
        }
    }
}

// The arguments and grid of backward_mma::flash_attention_backward_mma_kernel, which this kernel
// replaces at head dim 128: one block per 128 keys of a (batch, q head), 8 warps.
template <class T, bool kDropout>
__global__ void __launch_bounds__(kWarps * kWarp, 1)
    flash_attention_backward_mma_2d_kernel(float* dq_acc, T* dkv, std::int64_t ld_dkv, const T* dout, const T* qkv,
                                           const float* lse, const float* delta, SequenceSpans spans,
                                           std::int64_t rows, QkvHeads heads, float scale_log2, Dropout dropout,
                                           std::uint32_t site) {
    constexpr int kThreads = kWarps * kWarp;
    extern __shared__ __align__(16) unsigned char shared_raw[];
    T* const k_s = reinterpret_cast<T*>(shared_raw);
    T* const v_s = k_s + kKeys * kLd;
    T* const stages = v_s + kKeys * kLd;  // stage i: Q at i·kStageElems, dO after it
    T* const a_s = stages + 2 * kStageElems;  // A = P∘f [query][key]
    T* const ds_s = a_s + kQueries * kLdP;    // dS [query][key]
    float* const stats = reinterpret_cast<float*>(ds_s + kQueries * kLdP);  // stage i: lse, D

    const int c = heads.c();
    const BackwardBlock block(kKeys, spans, heads);
    const int h = block.h, key0 = block.key0, seq = block.seq;
    if (key0 >= seq) return;  // a key block past a shorter sequence's end
    const auto [row0, qkv_b, q_g, do_g, stat0, delta_b] = block.rows(kHd, qkv, dout, delta, spans, rows, heads);
    const int tid = static_cast<int>(threadIdx.x), warp = tid / kWarp, lane = tid % kWarp;
    const int group = lane / 4, pair = (lane % 4) * 2;
    const std::int64_t ld_qkv = heads.ld();
    const std::int64_t head = static_cast<std::int64_t>(h) * kHd;

    // The warp's pieces: of S and dP (queries sq.., keys sk..), of dK and dV (keys kk0.., dims
    // kd..), of dQ (queries sq.., dims qd..); offsets within the tile and the block.
    const int sq = (warp / 4) * 32, sk = (warp % 4) * 32;
    const int kk0 = (warp / 2) * 32, kd = (warp % 2) * 64;
    const int qd = (warp % 4) * 32;

    const auto load_queries = [&](int q0, int stage) {
        T* const q_s = stages + stage * kStageElems;
        backward_mma::load_tile<T, kHd, kLd, kThreads>(q_s, q_g, ld_qkv, q0, kQueries, seq, tid);
        backward_mma::load_tile<T, kHd, kLd, kThreads>(q_s + kQueries * kLd, do_g, c, q0, kQueries, seq, tid);
        if (tid < 2 * kQueries) {
            const int i = tid % kQueries;
            const bool valid = q0 + i < seq;
            const float* src = tid < kQueries ? lse + (valid ? stat0 + q0 + i : 0) : delta_b + (valid ? q0 + i : 0);
            cp_async_4(stats + stage * 2 * kQueries + tid, src, valid);
        }
        cp_async_commit();
    };
    backward_mma::load_tile<T, kHd, kLd, kThreads>(k_s, qkv_b + heads.k_col(h), ld_qkv, key0, kKeys, seq, tid);
    backward_mma::load_tile<T, kHd, kLd, kThreads>(v_s, qkv_b + heads.v_col(h), ld_qkv, key0, kKeys, seq, tid);
    load_queries(key0, 0);

    float dv[2][8][4] = {}, dk[2][8][4] = {};
    for (int q0 = key0, stage = 0; q0 < seq; q0 += kQueries, stage ^= 1) {
        cp_async_wait<0>();
        __syncthreads();  // this tile is here for every warp; the other stage, A and dS are free
        if (q0 + kQueries < seq) load_queries(q0 + kQueries, stage ^ 1);
        const T* const q_s = stages + stage * kStageElems;
        const T* const do_s = q_s + kQueries * kLd;
        const float* const lse_s = stats + stage * 2 * kQueries;
        const float* const delta_s = lse_s + kQueries;

        // S and dP of the warp's 32 queries × 32 keys; all masked (every key after every query,
        // or every query past seq): zeros stored instead.
        if (key0 + sk <= min(q0 + sq + 31, seq - 1)) {
            float s[2][4][4] = {}, dp[2][4][4] = {};
            product<T, 32, kHd / 16, kLd, kLd, false, true>(s, q_s + sq * kLd, k_s + sk * kLd, lane);
            product<T, 32, kHd / 16, kLd, kLd, false, true>(dp, do_s + sq * kLd, v_s + sk * kLd, lane);
            // Element e of (mi, j): query q0 + sq + 16·mi + group + 8·(e / 2), key key0 + sk + 8·j +
            // pair + e % 2. Only the diagonal tiles and a tile past seq mask anything.
            const bool edge = q0 < key0 + kKeys || q0 + kQueries > seq;
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
                const int r = sq + mi * 16 + group;  // the lane's first row in the tile; the second 8 on
                const float neg_lse_log2[2] = {-lse_s[r] * kLog2e, -lse_s[r + 8] * kLog2e};
                const float d[2] = {delta_s[r], delta_s[r + 8]};
#pragma unroll
                for (int j = 0; j < 4; ++j) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int query = q0 + r + 8 * (e / 2), key = key0 + sk + j * 8 + pair + e % 2;
                        float p = exp2f(fmaf(s[mi][j][e], scale_log2, neg_lse_log2[e / 2]));
                        if (edge && (key > query || query >= seq)) p = 0.0f;
                        float f = 1.0f;
                        if (kDropout && p != 0.0f)
                            f = dropout.probability_factor(site, static_cast<std::uint64_t>(stat0 + query),
                                                           static_cast<std::uint64_t>(key));
                        dp[mi][j][e] = p * (dp[mi][j][e] * f - d[e / 2]);
                        s[mi][j][e] = p * f;
                    }
                    const int col = sk + j * 8 + pair;
                    *reinterpret_cast<std::uint32_t*>(a_s + r * kLdP + col) = pack(s[mi][j][0], s[mi][j][1], T{});
                    *reinterpret_cast<std::uint32_t*>(a_s + (r + 8) * kLdP + col) = pack(s[mi][j][2], s[mi][j][3], T{});
                    *reinterpret_cast<std::uint32_t*>(ds_s + r * kLdP + col) = pack(dp[mi][j][0], dp[mi][j][1], T{});
                    *reinterpret_cast<std::uint32_t*>(ds_s + (r + 8) * kLdP + col) =
                        pack(dp[mi][j][2], dp[mi][j][3], T{});
                }
            }
        } else {
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
                const int r = sq + mi * 16 + group;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int col = sk + j * 8 + pair;
                    *reinterpret_cast<std::uint32_t*>(a_s + r * kLdP + col) = 0;
                    *reinterpret_cast<std::uint32_t*>(a_s + (r + 8) * kLdP + col) = 0;
                    *reinterpret_cast<std::uint32_t*>(ds_s + r * kLdP + col) = 0;
                    *reinterpret_cast<std::uint32_t*>(ds_s + (r + 8) * kLdP + col) = 0;
                }
            }
        }
        __syncthreads();  // A and dS of the whole tile are stored

        // dV += Aᵀ·dO and dK += dSᵀ·Q over the tile's queries, unless every one of the warp's keys
        // comes after every query of the tile (all of its Aᵀ and dSᵀ rows zero).
        if (key0 + kk0 <= min(q0 + kQueries - 1, seq - 1)) {
            product<T, 64, kQueries / 16, kLdP, kLd, true, false>(dv, a_s + kk0, do_s + kd, lane);
            product<T, 64, kQueries / 16, kLdP, kLd, true, false>(dk, ds_s + kk0, q_s + kd, lane);
        }

        // dQ's share of the block's keys, for the warp's 32 queries and 32 dims.
        if (q0 + sq < seq) {
            float acc[2][4][4] = {};
            product<T, 32, kKeys / 16, kLdP, kLd, false, false>(acc, ds_s + sq * kLdP, k_s + qd, lane);
#pragma unroll
            for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
                for (int half = 0; half < 2; ++half) {
                    const int query = q0 + sq + mi * 16 + group + 8 * half;
                    if (query >= seq) continue;
                    float* dq_row = dq_acc + (row0 + query) * c + head + qd + pair;
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        atomicAdd(reinterpret_cast<float2*>(dq_row + j * 8),
                                  make_float2(acc[mi][j][2 * half], acc[mi][j][2 * half + 1]));
                }
            }
        }
    }

    // dK = scale·dSᵀ·Q (scale = scale_log2 / log2(e)) and dV, two elements per 32-bit store.
    const float scale = scale_log2 * kLn2;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int key = key0 + kk0 + mi * 16 + group + 8 * half;
            if (key >= seq) continue;
            T* row = dkv + (row0 + key) * ld_dkv + head + kd;
#pragma unroll
            for (int n = 0; n < 8; ++n) {
                *reinterpret_cast<std::uint32_t*>(row + n * 8 + pair) =
                    pack(dk[mi][n][2 * half] * scale, dk[mi][n][2 * half + 1] * scale, T{});
                *reinterpret_cast<std::uint32_t*>(row + c + n * 8 + pair) =
                    pack(dv[mi][n][2 * half], dv[mi][n][2 * half + 1], T{});
            }
        }
    }
}

}  // namespace sweetspot::gpu::backward_mma_2d
