#pragma once
// The tensor-core form of the flash_attention kernel for fp32, at head dims that are multiples of 8
// up to 128. fp32 products on tensor cores need the 3xTF32 split: each operand x is the sum of
// big = x rounded to TF32 (11 significant bits) and small = x − big (the tensor cores keep its top 11 bits), and
//   a·b ≈ small_a·big_b + big_a·small_b + big_a·big_b,
// three mma.sync m16n8k8 TF32 products accumulated in fp32. The dropped small_a·small_b is
// 2⁻²² of the product, below fp32's own rounding of a long sum, so the result is as accurate as
// the CUDA-core kernel's (the test holds both to 1e-4 of a float64 reference) at the tensor
// cores' speed. PyTorch's fp32 scaled_dot_product_attention does the same on these GPUs.
// Included by gpu_flash_attention.cu, and by the backward's form
// (gpu_flash_attention_backward_tf32x3.cuh) for the split and the product.
//
// The layout is that of the fp16 / bf16 form (gpu_flash_attention_mma.cuh): 4 warps of 16 query
// rows, Q in registers as A fragments, key tiles in shared memory in two stages, the online
// softmax in registers (gpu_flash_attention_fragments.cuh). What differs:
//   - fragments come by plain 32-bit loads (ldmatrix moves 16-bit elements). Rows are padded to
//     hd + 4 floats: with a row length of 4 mod 8 words, the 32 words a warp reads for a K
//     fragment (8 keys × 4 d) and for a V fragment (4 key pairs × 8 d) fall in 32 banks;
//   - P·V takes S's accumulators as its A fragments without a shuffle by numbering the 8 keys of a
//     k-step in the order the accumulators hold them: lane column t stands for key 2t and column
//     t + 4 for key 2t + 1, and V's B fragment is read in the same order.
#include <cstdint>

#include "kernels/compute/device_common.cuh"
#include "kernels/compute/qkv_heads.hpp"
#include "kernels/compute/sequence_spans.hpp"
#include "kernels/compute/dropout.hpp"
#include "kernels/compute/gpu_flash_attention_fragments.cuh"

namespace sweetspot::gpu::tf32x3 {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 16;
constexpr int kRows = kWarps * kRowsPerWarp;  // query rows per block
constexpr int kPad = 4;

// Keys per tile: 64 where two stages of K and V leave room for three blocks per SM, 32 above
// head dim 64 for the same reason.
template <int kHd>
constexpr int keys_for() {
    return kHd <= 64 ? 64 : 32;
}

// Shared memory of a block: two stages of K and V tiles [kKeys][kHd + kPad] in fp32.
template <int kHd>
using Stages = KvStages<float, kHd, kHd + kPad, keys_for<kHd>(), kWarps * kWarp>;
template <int kHd>
constexpr std::size_t shared_bytes() {
    return Stages<kHd>::kBytes;
}

// x = big + small with big = x rounded to TF32 (cvt.rna) and small = x − big, exact in fp32. small
// goes to the tensor cores as it is: mma.sync reads a TF32 operand from the top 19 bits of its
// register and ignores the low 13, so truncating small there costs 2⁻¹¹ of small (2⁻²² of x), the
// same order as the dropped small_a·small_b, and saves a second conversion per element, a third of
// the split's instructions in loops that issue more of them than mma.sync.
// split_in_place is for operands that do not change between key tiles (Q's fragments): the
// volatile conversion stays where it is written, inside the tile loop, instead of being hoisted out
// of it, which would hold both halves of Q in registers for the whole kernel (twice Q's registers;
// head dim 128 spills).
struct Split {
    std::uint32_t big, small;
};
__device__ __forceinline__ Split split(float x) {
    Split r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r.big) : "f"(x));
    r.small = __float_as_uint(x - __uint_as_float(r.big));
    return r;
}
__device__ __forceinline__ Split split_in_place(float x) {
    Split r;
    asm volatile("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r.big) : "f"(x));
    r.small = __float_as_uint(x - __uint_as_float(r.big));
    return r;
}

__device__ __forceinline__ void mma_1688(float (&d)[4], std::uint32_t a0, std::uint32_t a1, std::uint32_t a2,
                                         std::uint32_t a3, std::uint32_t b0, std::uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// d += a·b for one m16n8k8 tile in about fp32's precision.
__device__ __forceinline__ void mma_3xtf32(float (&d)[4], const Split (&a)[4], float b0_f, float b1_f) {
    const Split b0 = split(b0_f), b1 = split(b1_f);
    mma_1688(d, a[0].small, a[1].small, a[2].small, a[3].small, b0.big, b1.big);
    mma_1688(d, a[0].big, a[1].big, a[2].big, a[3].big, b0.small, b1.small);
    mma_1688(d, a[0].big, a[1].big, a[2].big, a[3].big, b0.big, b1.big);
}

// Grid: x = batch · n_head, y = blocks of 64 query rows (the last rows, which see the most keys,
// first). Shared memory (dynamic, shared_bytes): two stages of K and V [kKeys][kHd + kPad].
template <int kHd>
__global__ void __launch_bounds__(kWarps * kWarp)
    flash_attention_tf32x3_kernel(float* out, float* lse, const float* qkv, SequenceSpans spans, QkvHeads heads,
                                  float scale_log2, Dropout dropout, std::uint32_t site) {
    const int c = heads.c(), n_head = heads.n_head;
    static_assert(kHd % 8 == 0 && kHd <= 128, "head dims that are multiples of 8, up to 128");
    constexpr int kKeys = keys_for<kHd>();
    constexpr int kLd = kHd + kPad;
    extern __shared__ float4 shared_f4[];
    float* const tiles = reinterpret_cast<float*>(shared_f4);

    const int bh = static_cast<int>(blockIdx.x);
    const int b = bh / n_head, h = bh % n_head;
    const int row0 = static_cast<int>(gridDim.y - 1 - blockIdx.y) * kRows;
    const int seq = spans.length(b);  // this sequence's positions
    if (row0 >= seq) return;          // a row block past a shorter sequence's end
    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
    const int group = lane / 4, quad_lane = lane % 4;
    const std::int64_t ld_qkv = heads.ld();
    const float* qkv_b = qkv + spans.first_row(b) * ld_qkv;
    const float* q_g = qkv_b + heads.q_col(h);
    const float* k_g = qkv_b + heads.k_col(h);
    const float* v_g = qkv_b + heads.v_col(h);
    const int warp_row0 = row0 + warp * kRowsPerWarp;
    const int rows[2] = {warp_row0 + group, warp_row0 + group + 8};

    // Q as A fragments of each 8-wide k-step, straight from global memory (read once), kept in
    // fp32 and split per tile (split_in_place). Rows past seq are 0.
    float q_frag[kHd / 8][4];
    const auto q_at = [&](int row, int col) { return row < seq ? q_g[row * ld_qkv + col] : 0.0f; };
#pragma unroll
    for (int kk = 0; kk < kHd / 8; ++kk) {
        q_frag[kk][0] = q_at(rows[0], kk * 8 + quad_lane);
        q_frag[kk][1] = q_at(rows[1], kk * 8 + quad_lane);
        q_frag[kk][2] = q_at(rows[0], kk * 8 + quad_lane + 4);
        q_frag[kk][3] = q_at(rows[1], kk * 8 + quad_lane + 4);
    }

    float o[kHd / 8][4] = {};
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    const int last = min(row0 + kRows, seq) - 1;
    const Stages<kHd> stages{tiles, k_g, v_g, ld_qkv, seq, tid};
    stages.load(0, 0);
    for (int k0 = 0, stage = 0; k0 <= last; k0 += kKeys, stage ^= 1) {
        stages.begin_tile(k0, stage, last);
        if (k0 > warp_row0 + kRowsPerWarp - 1) continue;  // every key after this warp's rows
        const float* k_s = stages.k(stage);
        const float* v_s = stages.v(stage);

        // S = Q·Kᵀ: per k-step of 8 d, Q's fragment is split once for the tile's kKeys / 8
        // n-tiles. B (col-major d × key) is K as stored: lane (group, t) reads K[group][t], K[group][t + 4].
        float s[kKeys / 8][4] = {};
#pragma unroll
        for (int kk = 0; kk < kHd / 8; ++kk) {
            const Split a[4] = {split_in_place(q_frag[kk][0]), split_in_place(q_frag[kk][1]), split_in_place(q_frag[kk][2]),
                                split_in_place(q_frag[kk][3])};
#pragma unroll
            for (int j = 0; j < kKeys / 8; ++j) {
                const float* k_row = k_s + (j * 8 + group) * kLd + kk * 8 + quad_lane;
                mma_3xtf32(s[j], a, k_row[0], k_row[4]);
            }
        }

        const ScoreTile at{{rows[0], rows[1]}, k0, 2 * quad_lane, k0 + kKeys - 1 > warp_row0, bh, spans.seq};
        online_softmax(s, o, row_max, row_sum, at, scale_log2, dropout, site);

        // O += P·V: the k-step is n-tile kk of S, whose accumulators (rows g, g + 8; keys 2t,
        // 2t + 1) are the A fragment with the keys in the order (2t ↔ column t, 2t + 1 ↔ t + 4).
#pragma unroll
        for (int kk = 0; kk < kKeys / 8; ++kk) {
            const Split a[4] = {split(s[kk][0]), split(s[kk][2]), split(s[kk][1]), split(s[kk][3])};
            const float* v_rows = v_s + (kk * 8 + 2 * quad_lane) * kLd + group;
#pragma unroll
            for (int n = 0; n < kHd / 8; ++n) mma_3xtf32(o[n], a, v_rows[n * 8], v_rows[kLd + n * 8]);
        }
    }

    store_logsumexp(lse, row_max, row_sum, rows, bh, spans.seq, seq, quad_lane);
    // O / l, two elements per 8-byte store.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (rows[r] >= seq) continue;
        const float inv = 1.0f / row_sum[r];
        float* o_g = out + (spans.first_row(b) + rows[r]) * c + static_cast<std::int64_t>(h) * kHd;
#pragma unroll
        for (int n = 0; n < kHd / 8; ++n) {
            *reinterpret_cast<float2*>(o_g + n * 8 + 2 * quad_lane) = make_float2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
        }
    }
}

}  // namespace sweetspot::gpu::tf32x3
