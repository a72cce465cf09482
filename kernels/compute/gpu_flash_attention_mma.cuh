#pragma once
// The tensor-core form of the flash_attention kernel, for fp16 and bf16 at head dimensions that
// are multiples of 16 (up to 128): the layout FlashAttention-2 uses, written with mma.sync
// m16n8k16 (fp32 accumulation). Included by gpu_flash_attention.cu only.
//
// A block is 4 warps and 64 query rows of one (batch, head); each warp owns 16 rows. Per tile of
// 64 keys:
//   S = Q·Kᵀ     Q stays in registers as A fragments for the whole kernel; K comes from shared
//                memory, stored key-major, which is the "col" B operand as it stands.
//   softmax      online, in registers (gpu_flash_attention_fragments.cuh).
//   O += P·V     P's accumulator fragments become the A fragments of the next product without
//                leaving registers; V stays key-major in shared memory and ldmatrix.trans hands
//                out its B fragments transposed.
// Fragments come from shared memory by ldmatrix, four 8×8 matrices per instruction. Shared
// memory rows are padded by 8 elements (16 bytes), so the 8 rows of each matrix start in
// different banks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/compute/device_common.cuh"
#include "kernels/compute/qkv_heads.hpp"
#include "kernels/compute/sequence_spans.hpp"
#include "kernels/compute/dropout.hpp"
#include "kernels/compute/gpu_flash_attention_fragments.cuh"

namespace sweetspot::gpu::mma {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 16;
constexpr int kRows = kWarps * kRowsPerWarp;  // query rows per block
constexpr int kKeys = 64;                     // keys per tile
constexpr int kPad = 8;

__device__ __forceinline__ std::uint32_t pack(float lo, float hi, __half) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
}
__device__ __forceinline__ std::uint32_t pack(float lo, float hi, __nv_bfloat16) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
}

// d = a·b + d for one m16n8k16 tile, fp32 accumulators.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
    if constexpr (std::is_same_v<T, __half>) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Four 8×8 b16 matrices from shared memory: lanes 8i .. 8i + 7 give the row addresses of matrix i
// (16 bytes each), and each lane gets its fragment of every matrix, as stored (b rows = n) or
// transposed (b rows = k).
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* row) {
    const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row) {
    const auto address = static_cast<std::uint32_t>(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

// Calls f(std::integral_constant<int, hd>) for each head dim the kernel is instantiated for.
template <class F>
void for_each_mma_head_dim(F&& f) {
    f(std::integral_constant<int, 32>{});
    f(std::integral_constant<int, 64>{});
    f(std::integral_constant<int, 80>{});
    f(std::integral_constant<int, 96>{});
    f(std::integral_constant<int, 128>{});
}

// Shared memory of a block: two stages of K and V tiles [kKeys][kHd + kPad], so the next tile
// loads while this one is computed with.
template <class T, int kHd>
using Stages = KvStages<T, kHd, kHd + kPad, kKeys, kWarps * kWarp>;
template <class T, int kHd>
constexpr std::size_t shared_bytes() {
    return Stages<T, kHd>::kBytes;
}

// Grid: one dimension, batch · n_head · row blocks of 64 query rows, in groups of `group` heads
// (the last group may have fewer): within a group, the row blocks that see the most keys first,
// across the group's heads. Blocks run in about that order, so the blocks running at once share a
// few groups' K and V in L2, where (batch, head) as the fast index of a 2-D grid had hundreds of
// heads' K and V outgrow it; and the heaviest blocks of each group start first. A grid of few
// waves takes all heads as one group, so that the heaviest blocks of all start first and none of
// them is left to run alone at the end. Shared memory (dynamic, shared_bytes): two stages of K
// and V [kKeys][kHd + kPad]. kMayDrop: launched with dropout; the form without has no dropout
// code, and up to head dim 64 fits the registers of four blocks an SM.
template <class T, int kHd, bool kMayDrop>
__global__ void __launch_bounds__(kWarps * kWarp, !kMayDrop && kHd <= 64 ? 4 : 1)
    flash_attention_mma_kernel(T* out, float* lse, const T* qkv, SequenceSpans spans, QkvHeads heads, int group,
                               float scale_log2, Dropout dropout, std::uint32_t site) {
    const int c = heads.c(), n_head = heads.n_head;
    static_assert(kHd % 16 == 0 && kHd <= 128, "head dims that are multiples of 16, up to 128");
    constexpr int kLd = kHd + kPad;
    extern __shared__ __align__(16) unsigned char shared_raw[];
    T* const tiles = reinterpret_cast<T*>(shared_raw);

    const int row_blocks = (spans.seq + kRows - 1) / kRows;
    const int batch_heads = static_cast<int>(gridDim.x / static_cast<unsigned>(row_blocks));
    const int x = static_cast<int>(blockIdx.x);
    const int first_head = x / (group * row_blocks) * group, in_group = x % (group * row_blocks);
    const int group_heads = min(group, batch_heads - first_head);
    const int bh = first_head + in_group % group_heads;
    const int b = bh / n_head, h = bh % n_head;
    const int row0 = (row_blocks - 1 - in_group / group_heads) * kRows;
    const int seq = spans.length(b);  // this sequence's positions
    if (row0 >= seq) return;          // a row block past a shorter sequence's end
    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
    const int quad_row = lane / 4, pair = (lane % 4) * 2;  // fragment row within 8, column pair
    const std::int64_t ld_qkv = heads.ld();
    const T* qkv_b = qkv + spans.first_row(b) * ld_qkv;
    const T* q_g = qkv_b + heads.q_col(h);
    const T* k_g = qkv_b + heads.k_col(h);
    const T* v_g = qkv_b + heads.v_col(h);
    const int warp_row0 = row0 + warp * kRowsPerWarp;
    const int rows[2] = {warp_row0 + quad_row, warp_row0 + quad_row + 8};

    // Q as A fragments, straight from global memory (read once): rows past seq are zeros.
    std::uint32_t q_frag[kHd / 16][4];
    const auto q_word = [&](int row, int col) -> std::uint32_t {
        if (row >= seq) return 0u;
        return *reinterpret_cast<const std::uint32_t*>(q_g + row * ld_qkv + col);
    };
#pragma unroll
    for (int kk = 0; kk < kHd / 16; ++kk) {
        q_frag[kk][0] = q_word(rows[0], kk * 16 + pair);
        q_frag[kk][1] = q_word(rows[1], kk * 16 + pair);
        q_frag[kk][2] = q_word(rows[0], kk * 16 + 8 + pair);
        q_frag[kk][3] = q_word(rows[1], kk * 16 + 8 + pair);
    }

    float o[kHd / 8][4] = {};
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    const int last = min(row0 + kRows, seq) - 1;
    const Stages<T, kHd> stages{tiles, k_g, v_g, ld_qkv, seq, tid};
    stages.load(0, 0);
    for (int k0 = 0, stage = 0; k0 <= last; k0 += kKeys, stage ^= 1) {
        stages.begin_tile(k0, stage, last);
        if (k0 > warp_row0 + kRowsPerWarp - 1) continue;
        const T* k_s = stages.k(stage);
        const T* v_s = stages.v(stage);

        // S = Q·Kᵀ for this warp's 16 rows and the tile's 64 keys: 8 n-tiles of 8 keys. One
        // ldmatrix gives the B fragments of two k-steps: matrices (keys j·8.., d 32·kk2 + 8·m).
        float s[kKeys / 8][4] = {};
        const int matrix = lane / 8, matrix_row = lane % 8;
#pragma unroll
        for (int j = 0; j < kKeys / 8; ++j) {
#pragma unroll
            for (int kk2 = 0; kk2 < kHd / 32; ++kk2) {
                std::uint32_t b[4];
                ldmatrix_x4(b, &k_s[(j * 8 + matrix_row) * kLd + kk2 * 32 + matrix * 8]);
                mma_16816<T>(s[j], q_frag[2 * kk2], b[0], b[1]);
                mma_16816<T>(s[j], q_frag[2 * kk2 + 1], b[2], b[3]);
            }
            if constexpr (kHd % 32 != 0) {  // the last 16 of a head dim such as 80
                std::uint32_t b[4];
                ldmatrix_x4(b, &k_s[(j * 8 + matrix_row) * kLd + (kHd - 16) + (matrix % 2) * 8]);
                mma_16816<T>(s[j], q_frag[kHd / 16 - 1], b[0], b[1]);
            }
        }

        // The causal mask and the online softmax: s becomes this tile's probabilities.
        const ScoreTile at{{rows[0], rows[1]}, k0, pair, k0 + kKeys - 1 > warp_row0, bh, spans.seq};
        online_softmax<kMayDrop>(s, o, row_max, row_sum, at, scale_log2, dropout, site);

        // O += P·V: 16 keys per k-step, P's accumulators re-packed as A fragments in place. One
        // ldmatrix.trans gives the B fragments of two n-tiles: matrices (keys 16·kk + 8·(m % 2),
        // d 16·n2 + 8·(m / 2)), each transposed to (k = key, n = d).
#pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
            const std::uint32_t p_frag[4] = {pack(s[2 * kk][0], s[2 * kk][1], T{}), pack(s[2 * kk][2], s[2 * kk][3], T{}),
                                             pack(s[2 * kk + 1][0], s[2 * kk + 1][1], T{}),
                                             pack(s[2 * kk + 1][2], s[2 * kk + 1][3], T{})};
#pragma unroll
            for (int n2 = 0; n2 < kHd / 16; ++n2) {
                std::uint32_t b[4];
                ldmatrix_x4_trans(b, &v_s[(kk * 16 + (matrix % 2) * 8 + matrix_row) * kLd + n2 * 16 + (matrix / 2) * 8]);
                mma_16816<T>(o[2 * n2], p_frag, b[0], b[1]);
                mma_16816<T>(o[2 * n2 + 1], p_frag, b[2], b[3]);
            }
        }
    }

    store_logsumexp(lse, row_max, row_sum, rows, bh, spans.seq, seq, pair);
    // O / l, two elements per 32-bit store.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (rows[r] >= seq) continue;
        const float inv = 1.0f / row_sum[r];
        T* o_g = out + (spans.first_row(b) + rows[r]) * c + static_cast<std::int64_t>(h) * kHd;
#pragma unroll
        for (int n = 0; n < kHd / 8; ++n) {
            *reinterpret_cast<std::uint32_t*>(o_g + n * 8 + pair) = pack(o[n][2 * r] * inv, o[n][2 * r + 1] * inv, T{});
        }
    }
}

}  // namespace sweetspot::gpu::mma
