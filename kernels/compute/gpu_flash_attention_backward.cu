// The backward of the `flash_attention` fusion, FlashAttention-2's algorithm: nothing of size
// [seq, seq] is stored; each block owns a block of keys, recomputes the probabilities of every
// query tile that sees them from q, k and the forward's logsumexp, and accumulates the keys' dK
// and dV in place while adding its share of dQ to an fp32 accumulator. Three steps:
//   D = rowsum(dO∘O)   per query row and head (the softmax backward's rowsum(P∘dP), which
//                      equals it since O = (P∘f)·V), eight lanes per row and head, in the same
//                      pass that zeroes the dQ accumulator;
//   the key blocks     tensor cores at head dims that are multiples of 16 up to 128: mma.sync
//                      for fp16 / bf16 (gpu_flash_attention_backward_mma.cuh; at head dim 128
//                      gpu_flash_attention_backward_mma_2d.cuh), 3xTF32 for fp32
//                      (gpu_flash_attention_backward_tf32x3.cuh); CUDA cores otherwise
//                      (gpu_flash_attention_backward_simt.cuh);
//   dQ                 the accumulator times 1/sqrt(hd), rounded to T into dqkv.
// The dropout factor of each probability is drawn again from its position, the forward's.
//
// Over grouped heads (qkv_heads.hpp) a key block is still one (batch, q head)'s, reading its
// group's k and v: the kernels and their speed are multi-head attention's. A kv head's dK and dV
// are the sums of its group's q heads' shares, so a key block writes its q head's share to scratch
// ([rows, 2c] in T, laid out as dqkv's k and v parts of multi-head attention, which is where
// multi-head attention writes them straight into dqkv) and a fourth step sums each group in fp32,
// its q heads in order: the same bits every run, as the multi-head dK and dV.
#include "kernels/compute/gpu_attention.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/kernel_shared_memory.cuh"
#include "kernels/compute/gpu_flash_attention_backward_mma.cuh"
#include "kernels/compute/gpu_flash_attention_backward_mma_2d.cuh"
#include "kernels/compute/gpu_flash_attention_backward_simt.cuh"
#include "kernels/compute/gpu_flash_attention_backward_tf32x3.cuh"

namespace sweetspot::gpu {
namespace {

constexpr int kBlock = 256;
constexpr int kPrepareLanes = 8;  // lanes per (row, head) in delta_zero_dq_kernel

// Elements of T in 16 bytes: the vector forms' access.
template <class T>
constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

// kVec consecutive elements of T, loaded or stored in accesses of up to 16 bytes.
template <class T, int kVec>
struct alignas(sizeof(T) * kVec < 16 ? sizeof(T) * kVec : 16) Vec {
    T v[kVec];
};

// The two passes over [rows, c] that the key blocks need done first, in one: delta[h·rows + row]
// = Σ_d dout[row, h·hd + d] · out[row, h·hd + d], and the same (row, head)'s slice of dq_acc
// zeroed. By row, not by (sequence, position): every row of a ragged batch is taken alike, and the
// padding rows' dQ comes out zero. kPrepareLanes lanes per (row, head), the heads of a row side by side, so a
// warp's accesses are contiguous; each lane takes kVec elements at a time (kVec = 16 bytes of T
// where the head dim and the pointers allow it, else 1).
template <class T, int kVec>
__global__ void __launch_bounds__(kBlock) delta_zero_dq_kernel(float* delta, float* dq_acc, const T* dout, const T* out,
                                                               std::int64_t rows, int c, int n_head) {
    const std::int64_t slice = (static_cast<std::int64_t>(blockIdx.x) * kBlock + threadIdx.x) / kPrepareLanes;
    const int lane = static_cast<int>(threadIdx.x) % kPrepareLanes;
    const bool valid = slice < rows * n_head;  // every lane stays for the shuffles
    const std::int64_t row = slice / n_head;
    const int h = static_cast<int>(slice % n_head), hd = c / n_head;
    const std::int64_t offset = row * c + static_cast<std::int64_t>(h) * hd;
    float sum = 0.0f;
    for (int d = lane * kVec; valid && d < hd; d += kPrepareLanes * kVec) {
        const Vec<T, kVec> dy = *reinterpret_cast<const Vec<T, kVec>*>(dout + offset + d);
        const Vec<T, kVec> y = *reinterpret_cast<const Vec<T, kVec>*>(out + offset + d);
#pragma unroll
        for (int i = 0; i < kVec; ++i) sum = fmaf(to_f32(dy.v[i]), to_f32(y.v[i]), sum);
        *reinterpret_cast<Vec<float, kVec>*>(dq_acc + offset + d) = Vec<float, kVec>{};
    }
    for (int width = kPrepareLanes / 2; width > 0; width /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, width);
    if (valid && lane == 0) delta[h * rows + row] = sum;
}

// dqkv[row, col] (the dq columns, rows ld_qkv apart) = dq_acc[row, col] · scale over rows × c,
// kVec columns per access (c and ld_qkv multiples of kVec).
template <class T, int kVec>
__global__ void __launch_bounds__(kBlock)
    store_dq_kernel(T* dqkv, const float* dq_acc, std::int64_t n, int c, std::int64_t ld_qkv, float scale) {
    for (std::int64_t i = (blockIdx.x * static_cast<std::int64_t>(kBlock) + threadIdx.x) * kVec; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * kBlock * kVec) {
        const std::int64_t row = i / c, col = i % c;
        const Vec<float, kVec> acc = *reinterpret_cast<const Vec<float, kVec>*>(dq_acc + i);
        Vec<T, kVec> dq;
#pragma unroll
        for (int k = 0; k < kVec; ++k) dq.v[k] = from_f32<T>(acc.v[k] * scale);
        *reinterpret_cast<Vec<T, kVec>*>(dqkv + row * ld_qkv + col) = dq;
    }
}

// Grouped heads' dK and dV: dqkv's k and v columns (2 · n_kv_head · hd a row, from column c) from
// the q heads' shares [rows, 2c] (dK of q head h at h·hd, dV at c + h·hd), kv head j's the sum of
// q heads j·group .. j·group + group − 1, in that order, in fp32. One element per thread: the
// shares of a group are hd apart in a row, so neighbouring threads read neighbouring elements.
template <class T>
__global__ void __launch_bounds__(kBlock) sum_kv_groups_kernel(T* dqkv, const T* shares, std::int64_t rows, QkvHeads heads) {
    const int hd = heads.head_dim, c = heads.c(), kv_c = heads.n_kv_head * hd;
    const int group = heads.n_head / heads.n_kv_head;
    const std::int64_t n = rows * 2 * kv_c, ld_qkv = heads.ld();
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(kBlock) + threadIdx.x; i < n;
         i += static_cast<std::int64_t>(gridDim.x) * kBlock) {
        const std::int64_t row = i / (2 * kv_c);
        const int col = static_cast<int>(i % (2 * kv_c));  // k heads, then v heads
        const int part = col / kv_c, j = (col % kv_c) / hd, d = col % hd;
        const T* share = shares + row * 2 * c + part * c + static_cast<std::int64_t>(j) * group * hd + d;
        float sum = 0.0f;
        for (int q = 0; q < group; ++q) sum += to_f32(share[q * hd]);
        dqkv[row * ld_qkv + c + col] = from_f32<T>(sum);
    }
}

// Positions per block of zero_padding_rows_kernel.
constexpr int kPaddingRowsPerBlock = 64;

// Zeroes `cols` elements at dst + row·ld of every row of a ragged batch outside its sequences (a
// padded batch's padding: sequence b's rows from its length up to the next sequence's first row,
// or to `rows` after the last), which no key block writes. Block x: sequence x / position_blocks,
// positions kPaddingRowsPerBlock·(x % position_blocks)..; a block of real rows only leaves at
// once, so a packed batch costs one check per block.
template <class T>
__global__ void __launch_bounds__(kBlock)
    zero_padding_rows_kernel(T* dst, std::int64_t ld, int cols, SequenceSpans spans, int batch, std::int64_t rows) {
    const int position_blocks = (spans.seq + kPaddingRowsPerBlock - 1) / kPaddingRowsPerBlock;
    const int b = static_cast<int>(blockIdx.x) / position_blocks;
    const int t0 = static_cast<int>(blockIdx.x) % position_blocks * kPaddingRowsPerBlock;
    const std::int64_t first = spans.first_row(b);
    const std::int64_t end = b + 1 < batch ? spans.first_row(b + 1) : rows;
    const std::int64_t from = first + max(t0, spans.length(b));
    const std::int64_t to = min(first + t0 + kPaddingRowsPerBlock, end);
    for (std::int64_t i = threadIdx.x; i < (to - from) * cols; i += kBlock)
        dst[(from + i / cols) * ld + i % cols] = from_f32<T>(0.0f);
}

// The tensor-core kernel of (T, kHd, kDropout) and the shared memory it launches with: 3xTF32 for
// fp32, mma.sync for fp16 and bf16, at head dim 128 with the products split over the warps in two
// dimensions. Every one is a block of 16 keys per warp.
template <class T, int kHd, bool kDropout>
constexpr auto tensor_core_kernel = [] {
    if constexpr (std::is_same_v<T, float>) {
        return backward_tf32x3::tuned_kernel<kHd, kDropout>;
    } else if constexpr (kHd == backward_mma_2d::kHd) {
        return backward_mma_2d::flash_attention_backward_mma_2d_kernel<T, kDropout>;
    } else {
        return backward_mma::tuned_kernel<T, kHd, kDropout>;
    }
}();
template <class T, int kHd>
constexpr std::size_t tensor_core_shared_bytes = [] {
    if constexpr (std::is_same_v<T, float>) {
        return backward_tf32x3::tuned_shared_bytes<kHd>;
    } else if constexpr (kHd == backward_mma_2d::kHd) {
        return backward_mma_2d::shared_bytes<T>();
    } else {
        return backward_mma::tuned_shared_bytes<T, kHd>;
    }
}();
// Warps per block of the tensor-core kernel of (T, kHd).
template <class T, int kHd>
constexpr int tensor_core_warps = [] {
    if constexpr (std::is_same_v<T, float>) {
        return backward_tf32x3::kWarps;
    } else if constexpr (kHd == backward_mma_2d::kHd) {
        return backward_mma_2d::kWarps;
    } else {
        return backward_mma::Tuning<kHd>::kWarps;
    }
}();
static_assert(backward_tf32x3::kKeysPerWarp == backward_mma::kKeysPerWarp, "16 keys a warp in both tensor-core kernels");

int blocks_for(std::int64_t threads) { return static_cast<int>(std::min<std::int64_t>((threads + kBlock - 1) / kBlock, 65536)); }

// Allows the kernels of T the dynamic shared memory they may launch with, once per process.
// Returns the device's shared memory per block.
template <class T>
int prepare_kernels() {
    static const int limit = [] {
        const int bytes = shared_memory_limit();
        const auto allow = [](auto kernel, std::size_t kernel_bytes) { allow_shared_memory(kernel, kernel_bytes); };
        for (const auto kernel : {backward_simt::flash_attention_backward_simt_kernel<T, 32>,
                                  backward_simt::flash_attention_backward_simt_kernel<T, 16>,
                                  backward_simt::flash_attention_backward_simt_kernel<T, 8>})
            allow(kernel, static_cast<std::size_t>(bytes));
        const auto allow_mma = [&](auto dropout) {
            constexpr bool kDropout = decltype(dropout)::value;
            allow(tensor_core_kernel<T, 32, kDropout>, tensor_core_shared_bytes<T, 32>);
            allow(tensor_core_kernel<T, 64, kDropout>, tensor_core_shared_bytes<T, 64>);
            allow(tensor_core_kernel<T, 80, kDropout>, tensor_core_shared_bytes<T, 80>);
            allow(tensor_core_kernel<T, 96, kDropout>, tensor_core_shared_bytes<T, 96>);
            allow(tensor_core_kernel<T, 128, kDropout>, tensor_core_shared_bytes<T, 128>);
        };
        allow_mma(std::false_type{});
        allow_mma(std::true_type{});
        return bytes;
    }();
    return limit;
}

// What the key-block kernels read and write besides the tensors: the dQ accumulator, the rows'
// D, and where the q heads' dK and dV go (dkv, rows ld_dkv apart: dqkv's k part, or the shares).
template <class T>
struct Problem {
    float* dq_acc;
    const float* delta;
    T* dkv;
    std::int64_t ld_dkv;
    int batch;
    SequenceSpans spans;
    std::int64_t rows;
    QkvHeads heads;
};

// The one-dimensional grid of the backward kernels: every key block of every (batch, q head).
template <class T>
unsigned blocks_of(const Problem<T>& p, int keys_per_block) {
    return static_cast<unsigned>(static_cast<std::int64_t>(p.batch) * p.heads.n_head *
                                 ((p.spans.seq + keys_per_block - 1) / keys_per_block));
}

// The tensor-core kernel where (T, hd) is one it is instantiated for, the rows are 16-byte
// aligned (cp.async) and dkv takes two elements per store; false otherwise.
template <class T>
bool launch_mma(const T* dout, const T* qkv, const float* lse, const Problem<T>& p, const Dropout& dropout,
                std::uint32_t site, cudaStream_t stream) {
    const int hd = p.heads.head_dim;
    if (reinterpret_cast<std::uintptr_t>(qkv) % 16 != 0 || reinterpret_cast<std::uintptr_t>(dout) % 16 != 0 ||
        reinterpret_cast<std::uintptr_t>(p.dkv) % (2 * sizeof(T)) != 0)
        return false;
    const float scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(hd));
    const auto go = [&](auto kernel, std::size_t bytes, int warps) {
        kernel<<<blocks_of(p, warps * backward_mma::kKeysPerWarp), warps * kWarp, bytes, stream>>>(
            p.dq_acc, p.dkv, p.ld_dkv, dout, qkv, lse, p.delta, p.spans, p.rows, p.heads, scale_log2, dropout, site);
        CUDA_CHECK_LAUNCH();
        return true;
    };
    const auto by_head_dim = [&](auto with_dropout) {
        constexpr bool kDropout = decltype(with_dropout)::value;
        switch (hd) {
            case 32: return go(tensor_core_kernel<T, 32, kDropout>, tensor_core_shared_bytes<T, 32>, tensor_core_warps<T, 32>);
            case 64: return go(tensor_core_kernel<T, 64, kDropout>, tensor_core_shared_bytes<T, 64>, tensor_core_warps<T, 64>);
            case 80: return go(tensor_core_kernel<T, 80, kDropout>, tensor_core_shared_bytes<T, 80>, tensor_core_warps<T, 80>);
            case 96: return go(tensor_core_kernel<T, 96, kDropout>, tensor_core_shared_bytes<T, 96>, tensor_core_warps<T, 96>);
            case 128:
                return go(tensor_core_kernel<T, 128, kDropout>, tensor_core_shared_bytes<T, 128>, tensor_core_warps<T, 128>);
            default: return false;
        }
    };
    return dropout.active() ? by_head_dim(std::true_type{}) : by_head_dim(std::false_type{});
}

// The CUDA-core kernel with the largest key tile whose shared memory fits `limit`.
template <class T>
void launch_simt(const T* dout, const T* qkv, const float* lse, const Problem<T>& p, const Dropout& dropout,
                 std::uint32_t site, cudaStream_t stream, int limit) {
    const int hd = p.heads.head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const auto go = [&](auto kernel, int tile) {
        const std::size_t bytes = backward_simt::shared_bytes(hd, tile);
        if (bytes > static_cast<std::size_t>(limit)) return false;
        const auto grid = blocks_of(p, tile);
        kernel<<<grid, backward_simt::kThreads, bytes, stream>>>(p.dq_acc, p.dkv, p.ld_dkv, dout, qkv, lse, p.delta,
                                                                 p.spans, p.rows, p.heads, scale, dropout, site);
        CUDA_CHECK_LAUNCH();
        return true;
    };
    using namespace backward_simt;
    if (go(flash_attention_backward_simt_kernel<T, 32>, 32) || go(flash_attention_backward_simt_kernel<T, 16>, 16) ||
        go(flash_attention_backward_simt_kernel<T, 8>, 8))
        return;
    throw std::invalid_argument("gpu::flash_attention_backward: head dimension " + std::to_string(hd) +
                                " needs more shared memory than the device's " + std::to_string(limit) + " bytes per block");
}

}  // namespace

template <class T>
void flash_attention_backward(T* dqkv, float* scratch, const T* dout, const T* qkv, const T* out, const float* lse,
                              int batch, SequenceSpans spans, std::int64_t rows, QkvHeads heads, const Dropout& dropout,
                              std::uint32_t site, cudaStream_t stream) {
    const int hd = heads.head_dim, c = heads.c(), n_head = heads.n_head;
    if (hd > kFlashAttentionMaxHeadDim) {
        throw std::invalid_argument("gpu::flash_attention_backward: head dimension " + std::to_string(hd) +
                                    " is above the " + std::to_string(kFlashAttentionMaxHeadDim) + " it supports");
    }
    if (heads.n_kv_head < 1 || n_head % heads.n_kv_head != 0)
        throw std::invalid_argument("gpu::flash_attention_backward: " + std::to_string(heads.n_kv_head) +
                                    " kv heads do not divide " + std::to_string(n_head) + " heads");
    if (rows == 0) return;
    if (static_cast<std::int64_t>(batch) * n_head * ((spans.seq + 7) / 8) > INT_MAX)
        throw std::invalid_argument("gpu::flash_attention_backward: batch × n_head × key blocks does not fit the grid");
    if (!spans.is_rectangular() && dropout.active())
        throw std::invalid_argument("gpu::flash_attention_backward: dropout needs a rectangular batch");
    const int limit = prepare_kernels<T>();
    // Multi-head attention's key blocks write dK and dV into dqkv; grouped heads' write their
    // shares, summed below.
    const bool grouped = heads.n_kv_head != n_head;
    T* const shares = grouped ? reinterpret_cast<T*>(scratch + flash_attention_backward_shares_offset(rows, heads)) : nullptr;
    const Problem<T> p{scratch,
                       scratch + rows * c,
                       grouped ? shares : dqkv + c,
                       grouped ? 2 * static_cast<std::int64_t>(c) : heads.ld(),
                       batch,
                       spans,
                       rows,
                       heads};
    const float* const accesses[] = {reinterpret_cast<const float*>(dout), reinterpret_cast<const float*>(out),
                                     reinterpret_cast<const float*>(dqkv), p.dq_acc};
    const bool vector = hd % kVec16<T> == 0 &&
                        std::all_of(std::begin(accesses), std::end(accesses),
                                    [](const float* a) { return reinterpret_cast<std::uintptr_t>(a) % 16 == 0; });
    const auto delta_zero_dq = vector ? delta_zero_dq_kernel<T, kVec16<T>> : delta_zero_dq_kernel<T, 1>;
    delta_zero_dq<<<static_cast<unsigned>((rows * n_head * kPrepareLanes + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
        scratch + rows * c, p.dq_acc, dout, out, rows, c, n_head);
    CUDA_CHECK_LAUNCH();
    if (!spans.is_rectangular()) {
        // dK and dV of the padding rows: zero (nothing attends to them), written where the key
        // blocks write theirs.
        const int position_blocks = (spans.seq + kPaddingRowsPerBlock - 1) / kPaddingRowsPerBlock;
        zero_padding_rows_kernel<T><<<static_cast<unsigned>(batch * position_blocks), kBlock, 0, stream>>>(
            p.dkv, p.ld_dkv, 2 * c, spans, batch, rows);
        CUDA_CHECK_LAUNCH();
    }
    const Dropout shaped = dropout.for_shape(spans.seq, dropout.positions);
    if (!launch_mma<T>(dout, qkv, lse, p, shaped, site, stream)) launch_simt<T>(dout, qkv, lse, p, shaped, site, stream, limit);
    const auto store_dq = vector ? store_dq_kernel<T, kVec16<T>> : store_dq_kernel<T, 1>;
    store_dq<<<blocks_for(rows * c / (vector ? kVec16<T> : 1)), kBlock, 0, stream>>>(
        dqkv, p.dq_acc, rows * c, c, heads.ld(), 1.0f / std::sqrt(static_cast<float>(hd)));
    CUDA_CHECK_LAUNCH();
    if (grouped) {
        sum_kv_groups_kernel<T><<<blocks_for(rows * 2 * heads.n_kv_head * hd), kBlock, 0, stream>>>(dqkv, shares, rows,
                                                                                                   heads);
        CUDA_CHECK_LAUNCH();
    }
}

template <class T>
void flash_attention_backward(T* dqkv, float* scratch, const T* dout, const T* qkv, const T* out, const float* lse,
                              int batch, int seq, QkvHeads heads, const Dropout& dropout, std::uint32_t site,
                              cudaStream_t stream) {
    flash_attention_backward<T>(dqkv, scratch, dout, qkv, out, lse, batch, SequenceSpans::rectangular(seq),
                                static_cast<std::int64_t>(batch) * seq, heads, dropout, site, stream);
}

template <class T>
void flash_attention_backward(T* dqkv, float* scratch, const T* dout, const T* qkv, const T* out, const float* lse,
                              int batch, int seq, int c, int n_head, const Dropout& dropout, std::uint32_t site,
                              cudaStream_t stream) {
    flash_attention_backward<T>(dqkv, scratch, dout, qkv, out, lse, batch, seq, QkvHeads::multi_head(c, n_head),
                                dropout, site, stream);
}

#define SWEETSPOT_INSTANTIATE(T)                                                                                     \
    template void flash_attention_backward<T>(T*, float*, const T*, const T*, const T*, const float*, int,           \
                                              SequenceSpans, std::int64_t, QkvHeads, const Dropout&, std::uint32_t,  \
                                              cudaStream_t);                                                         \
    template void flash_attention_backward<T>(T*, float*, const T*, const T*, const T*, const float*, int, int,      \
                                              QkvHeads, const Dropout&, std::uint32_t, cudaStream_t);                \
    template void flash_attention_backward<T>(T*, float*, const T*, const T*, const T*, const float*, int, int, int, \
                                              int, const Dropout&, std::uint32_t, cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
