#pragma once
// Where a block of the flash attention backward works, in each of its kernels (simt, mma, mma_2d,
// tf32x3): they share the grid, one dimension of the key blocks of each (batch, q head) side by
// side (block x: (batch, head) x / key_blocks, its keys `keys`·(x % key_blocks)..), and read their
// queries' Q, dO, lse and D from the same places. In two steps, so that a block past a shorter
// sequence's end returns before it reads where that sequence lies. Included by the backward
// kernels' headers only.
#include <cstdint>

#include "kernels/compute/qkv_heads.hpp"
#include "kernels/compute/sequence_spans.hpp"

namespace sweetspot::gpu {

// The rows of the block's sequence, and in them its q head's.
template <class T>
struct BackwardRows {
    std::int64_t row0;     // the sequence's first row
    const T* qkv_b;        // qkv's rows of the sequence
    const T* q_g;          // the q head's Q in them, rows heads.ld() apart
    const T* do_g;         // its dO, rows heads.c() apart
    std::int64_t stat0;    // lse's and the dropout's numbering of the sequence's first position
    const float* delta_b;  // D of the q head in the sequence's rows
};

struct BackwardBlock {
    int bh;    // the (batch row, q head) pair, numbered as lse's rows
    int b, h;  // and each
    int key0;  // the block's first key
    int seq;   // its sequence's positions: key0 >= seq is a block past a shorter sequence's end

    __device__ __forceinline__ BackwardBlock(int keys, const SequenceSpans& spans, const QkvHeads& heads) {
        const int key_blocks = (spans.seq + keys - 1) / keys;
        bh = static_cast<int>(blockIdx.x / key_blocks);
        b = bh / heads.n_head;
        h = bh % heads.n_head;
        key0 = static_cast<int>(blockIdx.x % key_blocks) * keys;
        seq = spans.length(b);
    }

    template <class T>
    __device__ __forceinline__ BackwardRows<T> rows(int head_dim, const T* qkv, const T* dout, const float* delta,
                                                    const SequenceSpans& spans, std::int64_t all_rows,
                                                    const QkvHeads& heads) const {
        const std::int64_t row0 = spans.first_row(b);
        const T* qkv_b = qkv + row0 * heads.ld();
        return {.row0 = row0,
                .qkv_b = qkv_b,
                .q_g = qkv_b + heads.q_col(h),
                .do_g = dout + row0 * heads.c() + static_cast<std::int64_t>(h) * head_dim,
                .stat0 = static_cast<std::int64_t>(bh) * spans.seq,
                .delta_b = delta + h * all_rows + row0};
    }
};

}  // namespace sweetspot::gpu
