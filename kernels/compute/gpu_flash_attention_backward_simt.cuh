#pragma once
// The CUDA-core form of the flash attention backward: every dtype and head dim up to
// kFlashAttentionMaxHeadDim, in fp32 throughout. Included by gpu_flash_attention_backward.cu only.
//
// A block owns kTile keys of one (batch, q head) and walks the query tiles that see them (from its
// own first key to the end: causal). Everything lives in shared memory, so no register array
// depends on the head dim: the keys' K and V and their dK and dV accumulators [kTile][hd + 1],
// the query tile's Q and dO [kTile][hd + 1], its lse and D, and the tile's A = P∘f and
// dS [kTile][kTile + 1]. Per query tile, each step a loop of the block's threads over elements:
//   P, dS        element (query i, key j): s = q_i·k_j, dp = do_i·v_j, P = exp(s/sqrt(hd) − lse_i),
//                dS = P∘(f∘dp − D_i) with f the forward's dropout factor, and A = P∘f;
//   dV, dK       element (key j, d): dV += Σ_i A·dO, dK += Σ_i dS·Q, each element one thread's;
//   dQ           element (query i, d): Σ_j dS·K, added to the fp32 accumulator atomically (other
//                blocks own the other keys of the same query).
// The +1 pads make the rows a warp reads at once start in different banks.
#include <cstddef>
#include <cstdint>

#include "kernels/compute/device_common.cuh"
#include "kernels/compute/dropout.hpp"
#include "kernels/compute/gpu_flash_attention_backward_block.cuh"
#include "kernels/compute/qkv_heads.hpp"
#include "kernels/compute/sequence_spans.hpp"

namespace sweetspot::gpu::backward_simt {

constexpr int kThreads = 256;

// Shared memory of a block, in bytes: six [tile][hd + 1] arrays (K, V, dK, dV, Q, dO), A and dS
// [tile][tile + 1], lse and D [tile].
inline std::size_t shared_bytes(int hd, int tile) {
    const auto ld = static_cast<std::size_t>(hd) + 1, t = static_cast<std::size_t>(tile);
    return sizeof(float) * (6 * t * ld + 2 * t * (t + 1) + 2 * t);
}

// Grid: one dimension, the key blocks of each (batch, head) side by side (block x: head
// x / key_blocks, keys kTile·(x % key_blocks)..), so the blocks running at once share a few heads'
// Q, dO and dQ accumulator in L2; within a head the first keys, which the most queries see, first.
// qkv is packed as `heads` says, block x's head is a q head and its k and v those of its group.
// The sequences lie in the rows as `spans` says (sequence_spans.hpp; spans.seq the longest): a key
// block past its sequence's length has nothing to do. dq_acc [rows, c] fp32 gets this block's share
// of dQ / scale; the q head's dK and dV go to dkv: row r's at dkv + r·ld_dkv + h·hd and c further
// on (gpu_flash_attention_backward.cu says which buffer). lse is [batch·n_head, spans.seq], as the
// forward writes it; delta [n_head, rows], by row so that it needs no row's sequence;
// scale = 1/sqrt(hd).
template <class T, int kTile>
__global__ void __launch_bounds__(kThreads)
    flash_attention_backward_simt_kernel(float* dq_acc, T* dkv, std::int64_t ld_dkv, const T* dout, const T* qkv,
                                         const float* lse, const float* delta, SequenceSpans spans, std::int64_t rows,
                                         QkvHeads heads, float scale, Dropout dropout, std::uint32_t site) {
    extern __shared__ float shared[];
    const int c = heads.c(), hd = heads.head_dim;
    const int ld = hd + 1;
    constexpr int kLdP = kTile + 1;
    float* const k_s = shared;
    float* const v_s = k_s + kTile * ld;
    float* const dk_s = v_s + kTile * ld;
    float* const dv_s = dk_s + kTile * ld;
    float* const q_s = dv_s + kTile * ld;
    float* const do_s = q_s + kTile * ld;
    float* const a_s = do_s + kTile * ld;  // [kTile queries][kLdP]
    float* const ds_s = a_s + kTile * kLdP;
    float* const lse_s = ds_s + kTile * kLdP;
    float* const delta_s = lse_s + kTile;

    const BackwardBlock block(kTile, spans, heads);
    const int h = block.h, key0 = block.key0, seq = block.seq;
    if (key0 >= seq) return;  // a key block past a shorter sequence's end
    const auto [row0, qkv_b, q_g, do_g, stat0, delta_b] = block.rows(hd, qkv, dout, delta, spans, rows, heads);
    const int tid = static_cast<int>(threadIdx.x);
    const std::int64_t ld_qkv = heads.ld();
    const std::int64_t head = static_cast<std::int64_t>(h) * hd;
    const T* k_g = qkv_b + heads.k_col(h);
    const T* v_g = qkv_b + heads.v_col(h);

    for (int i = tid; i < kTile * hd; i += kThreads) {
        const int kk = i / hd, d = i % hd;
        const int pos = key0 + kk;
        k_s[kk * ld + d] = pos < seq ? to_f32(k_g[pos * ld_qkv + d]) : 0.0f;
        v_s[kk * ld + d] = pos < seq ? to_f32(v_g[pos * ld_qkv + d]) : 0.0f;
        dk_s[kk * ld + d] = 0.0f;
        dv_s[kk * ld + d] = 0.0f;
    }

    for (int q0 = key0; q0 < seq; q0 += kTile) {
        __syncthreads();  // the previous tile's Q, dO, A and dS are read (and K, V stored)
        for (int i = tid; i < kTile * hd; i += kThreads) {
            const int qq = i / hd, d = i % hd;
            const int pos = q0 + qq;
            q_s[qq * ld + d] = pos < seq ? to_f32(q_g[pos * ld_qkv + d]) : 0.0f;
            do_s[qq * ld + d] = pos < seq ? to_f32(do_g[static_cast<std::int64_t>(pos) * c + d]) : 0.0f;
        }
        if (tid < kTile) {
            lse_s[tid] = q0 + tid < seq ? lse[stat0 + q0 + tid] : 0.0f;
            delta_s[tid] = q0 + tid < seq ? delta_b[q0 + tid] : 0.0f;
        }
        __syncthreads();

        for (int e = tid; e < kTile * kTile; e += kThreads) {
            const int i = e / kTile, j = e % kTile;
            const int query = q0 + i, key = key0 + j;
            float a = 0.0f, ds = 0.0f;
            if (query < seq && key <= query) {
                float s = 0.0f, dp = 0.0f;
                for (int d = 0; d < hd; ++d) {
                    s = fmaf(q_s[i * ld + d], k_s[j * ld + d], s);
                    dp = fmaf(do_s[i * ld + d], v_s[j * ld + d], dp);
                }
                const float p = expf(s * scale - lse_s[i]);
                const float f = dropout.active() ? dropout.probability_factor(site, static_cast<std::uint64_t>(stat0 + query),
                                                                              static_cast<std::uint64_t>(key))
                                                 : 1.0f;
                a = p * f;
                ds = p * (dp * f - delta_s[i]);
            }
            a_s[i * kLdP + j] = a;
            ds_s[i * kLdP + j] = ds;
        }
        __syncthreads();

        for (int e = tid; e < kTile * hd; e += kThreads) {
            const int j = e / hd, d = e % hd;
            float dv = 0.0f, dk = 0.0f;
#pragma unroll 8
            for (int i = 0; i < kTile; ++i) {
                dv = fmaf(a_s[i * kLdP + j], do_s[i * ld + d], dv);
                dk = fmaf(ds_s[i * kLdP + j], q_s[i * ld + d], dk);
            }
            dv_s[j * ld + d] += dv;
            dk_s[j * ld + d] += dk;
        }
        for (int e = tid; e < kTile * hd; e += kThreads) {
            const int i = e / hd, d = e % hd;
            if (q0 + i >= seq) continue;
            float dq = 0.0f;
#pragma unroll 8
            for (int j = 0; j < kTile; ++j) dq = fmaf(ds_s[i * kLdP + j], k_s[j * ld + d], dq);
            atomicAdd(dq_acc + (row0 + q0 + i) * c + head + d, dq);
        }
    }

    // Each thread writes the dK and dV elements it accumulated (the same mapping as above).
    for (int e = tid; e < kTile * hd; e += kThreads) {
        const int j = e / hd, d = e % hd;
        const int pos = key0 + j;
        if (pos >= seq) continue;
        T* row = dkv + (row0 + pos) * ld_dkv + head;
        row[d] = from_f32<T>(dk_s[j * ld + d] * scale);
        row[c + d] = from_f32<T>(dv_s[j * ld + d]);
    }
}

}  // namespace sweetspot::gpu::backward_simt
