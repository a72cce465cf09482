// The `flash_attention` fusion: the whole attention core of one (batch, head) and a block of
// query rows in one kernel, QKᵀ, the causal mask, an online softmax and ·V, with no [seq, seq]
// buffer (the scores of one key tile live in shared memory and registers only). Four forms:
//   - fp16 and bf16 at head dims 32, 64, 80, 96 and 128: tensor cores (gpu_flash_attention_mma.cuh);
//   - fp32 at the same head dims: tensor cores with the 3xTF32 split, as accurate as fp32 on CUDA
//     cores (gpu_flash_attention_tf32x3.cuh);
//   - any other case up to head dim 256: a register-tiled kernel on CUDA cores
//     (gpu_flash_attention_simt.cuh);
//   - head dims 257 .. kFlashAttentionMaxHeadDim, which no built-in model has: the kernel below,
//     slower, whose registers do not grow with the head dim.
// The last two compute in fp32 throughout.
//
// Below, a quad of threads owns a query row: for each tile of keys, each thread scores a quarter of the
// keys, the quad agrees on the row's running max and sum by shuffles, and each thread then
// updates a quarter of the row's output columns. The output accumulates in shared memory, so no
// register array depends on the head dimension.
//
// Numbers: the scores stay fp32 from the products to the probabilities (baseline stores them in
// the dtype between its kernels), and the dropout factor multiplies a probability's numerator
// only, so O = Σ exp(s − m)·f·v / Σ exp(s − m): the same function as baseline's
// dropout(softmax(s))·V, with other last bits.
#include "kernels/compute/gpu_attention.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/qkv_heads.hpp"
#include "kernels/compute/sequence_spans.hpp"
#include "kernels/compute/kernel_shared_memory.cuh"
#include "kernels/compute/gpu_flash_attention_mma.cuh"
#include "kernels/compute/gpu_flash_attention_simt.cuh"
#include "kernels/compute/gpu_flash_attention_tf32x3.cuh"

namespace sweetspot::gpu {
namespace {

constexpr int kRows = 32;          // query rows per block
constexpr int kThreadsPerRow = 4;  // a quad: its lanes are neighbours, so shuffles reach them
constexpr int kThreads = kRows * kThreadsPerRow;

// Shared memory of a block, in floats: the query rows and the output rows [kRows, hd + 1], a key
// and a value tile [tile, hd + 1], the tile's probabilities [kRows, tile + 1]. The +1 pads make
// rows that start in different banks.
std::size_t shared_floats(int hd, int tile) {
    const auto ld = static_cast<std::size_t>(hd) + 1;
    return 2 * kRows * ld + 2 * static_cast<std::size_t>(tile) * ld + kRows * (static_cast<std::size_t>(tile) + 1);
}

// Grid: x = batch · n_head (which (b, h)), y = query-row blocks, the longest (last rows, which
// see the most keys) scheduled first.
template <class T, int kTile>
__global__ void __launch_bounds__(kThreads)
    flash_attention_kernel(T* out, float* lse, const T* qkv, SequenceSpans spans, QkvHeads heads, float scale,
                           Dropout dropout, std::uint32_t site) {
    const int c = heads.c(), n_head = heads.n_head;
    extern __shared__ float shared[];
    const int hd = heads.head_dim;
    const int ld = hd + 1;
    float* q_s = shared;              // [kRows][ld], pre-scaled by 1/sqrt(hd)
    float* o_s = q_s + kRows * ld;    // [kRows][ld]
    float* k_s = o_s + kRows * ld;    // [kTile][ld]
    float* v_s = k_s + kTile * ld;    // [kTile][ld]
    float* p_s = v_s + kTile * ld;    // [kRows][kTile + 1]

    const int bh = static_cast<int>(blockIdx.x);
    const int b = bh / n_head, h = bh % n_head;
    const int row0 = static_cast<int>(gridDim.y - 1 - blockIdx.y) * kRows;
    const int seq = spans.length(b);  // this sequence's positions
    if (row0 >= seq) return;          // a row block past a shorter sequence's end
    const int tid = static_cast<int>(threadIdx.x);
    const int r = tid / kThreadsPerRow, quad = tid % kThreadsPerRow;
    const int t = row0 + r;  // this thread's query position
    const std::int64_t ld_qkv = heads.ld();
    const T* qkv_b = qkv + spans.first_row(b) * ld_qkv;
    const T* q_g = qkv_b + heads.q_col(h);
    const T* k_g = qkv_b + heads.k_col(h);
    const T* v_g = qkv_b + heads.v_col(h);

    for (int i = tid; i < kRows * hd; i += kThreads) {
        const int rr = i / hd, d = i % hd;
        const int pos = row0 + rr;
        q_s[rr * ld + d] = pos < seq ? to_f32(q_g[pos * ld_qkv + d]) * scale : 0.0f;
        o_s[rr * ld + d] = 0.0f;
    }

    float row_max = -INFINITY, row_sum = 0.0f;
    const int last = min(row0 + kRows, seq) - 1;  // the block's last query sees keys 0 .. last
    for (int k0 = 0; k0 <= last; k0 += kTile) {
        __syncthreads();  // the previous tile's keys and values are no longer read
        for (int i = tid; i < kTile * hd; i += kThreads) {
            const int kk = i / hd, d = i % hd;
            const int pos = k0 + kk;
            k_s[kk * ld + d] = pos < seq ? to_f32(k_g[pos * ld_qkv + d]) : 0.0f;
            v_s[kk * ld + d] = pos < seq ? to_f32(v_g[pos * ld_qkv + d]) : 0.0f;
        }
        __syncthreads();

        // Scores of this thread's keys: quad, quad + 4, ... of the tile; masked ones are −inf.
        constexpr int kKeys = kTile / kThreadsPerRow;
        float s[kKeys];
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < kKeys; ++j) {
            const int key = k0 + quad + kThreadsPerRow * j;
            float score = -INFINITY;
            if (t < seq && key <= t) {
                const float* q = q_s + r * ld;
                const float* k = k_s + (quad + kThreadsPerRow * j) * ld;
                float acc = 0.0f;
                for (int d = 0; d < hd; ++d) acc += q[d] * k[d];
                score = acc;
            }
            s[j] = score;
            tile_max = fmaxf(tile_max, score);
        }
        const float new_max = fmaxf(row_max, quad_max(tile_max));
        // A row none of whose keys so far is visible (a padding row past seq) keeps zeros.
        const float rescale = row_max == -INFINITY ? 0.0f : __expf(row_max - new_max);
        float tile_sum = 0.0f;
        const auto prob_row =
            static_cast<std::uint64_t>(bh) * static_cast<std::uint64_t>(spans.seq) + static_cast<std::uint64_t>(t);
#pragma unroll
        for (int j = 0; j < kKeys; ++j) {
            const int kk = quad + kThreadsPerRow * j;
            const float p = s[j] == -INFINITY ? 0.0f : __expf(s[j] - new_max);
            tile_sum += p;
            const float keep = dropout.active() && p != 0.0f
                                   ? dropout.probability_factor(site, prob_row, static_cast<std::uint64_t>(k0 + kk))
                                   : 1.0f;
            p_s[r * (kTile + 1) + kk] = p * keep;
        }
        row_sum = row_sum * rescale + quad_sum(tile_sum);
        row_max = new_max;
        __syncwarp();  // the quad's probabilities are written before any of its lanes reads them

        const float* p = p_s + r * (kTile + 1);
        for (int d = quad; d < hd; d += kThreadsPerRow) {
            float acc = o_s[r * ld + d] * rescale;
#pragma unroll 8
            for (int kk = 0; kk < kTile; ++kk) acc += p[kk] * v_s[kk * ld + d];
            o_s[r * ld + d] = acc;
        }
        __syncwarp();  // reads of p_s end before the next tile's scores overwrite it
    }

    if (t >= seq) return;
    if (lse != nullptr && quad == 0) lse[static_cast<std::int64_t>(bh) * spans.seq + t] = row_max + logf(row_sum);
    T* o_g = out + (spans.first_row(b) + t) * c + static_cast<std::int64_t>(h) * hd;
    const float inv_sum = 1.0f / row_sum;
    for (int d = quad; d < hd; d += kThreadsPerRow) o_g[d] = from_f32<T>(o_s[r * ld + d] * inv_sum);
}

// Allows every flash-attention kernel of T the dynamic shared memory it may launch with, once per
// process rather than at every launch (a forward launches the attention once per layer, and the
// host is on the critical path of short forwards; a cell process uses one GPU). Returns the
// device's shared memory per block: the quad kernels may use all of it, the others take what
// their head dim needs.
template <class T>
int prepare_kernels() {
    static const int limit = [] {
        const int bytes = shared_memory_limit();
        const auto allow = [](auto kernel, std::size_t kernel_bytes) { allow_shared_memory(kernel, kernel_bytes); };
        for (const auto kernel : {flash_attention_kernel<T, 64>, flash_attention_kernel<T, 32>, flash_attention_kernel<T, 16>,
                                  flash_attention_kernel<T, 8>, flash_attention_kernel<T, 4>})
            allow(kernel, static_cast<std::size_t>(bytes));
        const auto allow_simt = [&](auto async) {
            constexpr bool kAsync = decltype(async)::value;
            allow(simt::flash_attention_simt_kernel<T, 1, kAsync>, simt::shared_bytes(64));
            allow(simt::flash_attention_simt_kernel<T, 2, kAsync>, simt::shared_bytes(128));
            allow(simt::flash_attention_simt_kernel<T, 3, kAsync>, simt::shared_bytes(192));
            allow(simt::flash_attention_simt_kernel<T, 4, kAsync>, simt::shared_bytes(256));
        };
        allow_simt(std::false_type{});
        if constexpr (std::is_same_v<T, float>) allow_simt(std::true_type{});
        if constexpr (std::is_same_v<T, float>) {
            allow(tf32x3::flash_attention_tf32x3_kernel<32>, tf32x3::shared_bytes<32>());
            allow(tf32x3::flash_attention_tf32x3_kernel<64>, tf32x3::shared_bytes<64>());
            allow(tf32x3::flash_attention_tf32x3_kernel<80>, tf32x3::shared_bytes<80>());
            allow(tf32x3::flash_attention_tf32x3_kernel<96>, tf32x3::shared_bytes<96>());
            allow(tf32x3::flash_attention_tf32x3_kernel<128>, tf32x3::shared_bytes<128>());
        } else {
            mma::for_each_mma_head_dim([&](auto head_dim) {
                constexpr int kHd = decltype(head_dim)::value;
                allow(mma::flash_attention_mma_kernel<T, kHd, false>, mma::shared_bytes<T, kHd>());
                allow(mma::flash_attention_mma_kernel<T, kHd, true>, mma::shared_bytes<T, kHd>());
            });
        }
        return bytes;
    }();
    return limit;
}

// The register-tiled CUDA-core kernel, with as many groups of 64 output columns per thread as the
// head dim needs; false above its largest head dim.
template <class T>
bool launch_simt(T* out, float* lse, const T* qkv, int batch, SequenceSpans spans, QkvHeads heads,
                 const Dropout& dropout, std::uint32_t site, cudaStream_t stream) {
    const int hd = heads.head_dim, n_head = heads.n_head;
    if (hd > simt::kMaxHeadDim) return false;
    const float scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(hd));
    const dim3 grid(static_cast<unsigned>(batch * n_head),
                    static_cast<unsigned>((spans.seq + simt::kRows - 1) / simt::kRows));
    const auto launch = [&](auto async) {
        constexpr bool kAsync = decltype(async)::value;
        const auto go = [&](auto kernel) {
            kernel<<<grid, simt::kThreads, simt::shared_bytes(hd), stream>>>(out, lse, qkv, spans, heads,
                                                                            scale_log2, dropout, site);
            CUDA_CHECK_LAUNCH();
            return true;
        };
        switch (simt::groups_for(hd)) {
            case 1: return go(simt::flash_attention_simt_kernel<T, 1, kAsync>);
            case 2: return go(simt::flash_attention_simt_kernel<T, 2, kAsync>);
            case 3: return go(simt::flash_attention_simt_kernel<T, 3, kAsync>);
            default: return go(simt::flash_attention_simt_kernel<T, 4, kAsync>);
        }
    };
    // cp.async copies 16 bytes as they are: fp32 rows of whole 16-byte units, from an aligned base.
    if constexpr (std::is_same_v<T, float>) {
        if (hd % 4 == 0 && reinterpret_cast<std::uintptr_t>(qkv) % 16 == 0) return launch(std::true_type{});
    }
    return launch(std::false_type{});
}

// The quad kernel with the largest key tile whose shared memory fits `limit`.
template <class T>
void launch_with_tile(T* out, float* lse, const T* qkv, int batch, SequenceSpans spans, QkvHeads heads,
                      const Dropout& dropout, std::uint32_t site, cudaStream_t stream, int limit) {
    const int hd = heads.head_dim, n_head = heads.n_head;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const dim3 grid(static_cast<unsigned>(batch * n_head), static_cast<unsigned>((spans.seq + kRows - 1) / kRows));
    const auto launch = [&](auto kernel, int tile) {
        const std::size_t bytes = shared_floats(hd, tile) * sizeof(float);
        if (bytes > static_cast<std::size_t>(limit)) return false;
        kernel<<<grid, kThreads, bytes, stream>>>(out, lse, qkv, spans, heads, scale, dropout, site);
        CUDA_CHECK_LAUNCH();
        return true;
    };
    if (launch(flash_attention_kernel<T, 64>, 64) || launch(flash_attention_kernel<T, 32>, 32) ||
        launch(flash_attention_kernel<T, 16>, 16) || launch(flash_attention_kernel<T, 8>, 8) ||
        launch(flash_attention_kernel<T, 4>, 4))
        return;
    throw std::invalid_argument("gpu::flash_attention: head dimension " + std::to_string(hd) +
                                " needs more shared memory than the device's " + std::to_string(limit) + " bytes per block");
}

// The tensor-core kernel's head groups (flash_attention_mma_kernel's grid): 8 heads' K and V are
// a few MiB at the built-in models' shapes, so the groups running at once stay in L2; a grid of
// fewer than kHeadGroupWaves waves of blocks takes all its heads as one group.
constexpr int kHeadGroup = 8;
constexpr std::int64_t kHeadGroupWaves = 4;

// How many blocks of the tensor-core kernel (T, kHd, kMayDrop) the device runs at once.
template <class T, int kHd, bool kMayDrop>
std::int64_t resident_blocks() {
    static const std::int64_t blocks = [] {
        int device = 0, sms = 0, per_sm = 0;
        CUDA_CHECK(cudaGetDevice(&device));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mma::flash_attention_mma_kernel<T, kHd, kMayDrop>,
                                                                 mma::kWarps * kWarp, mma::shared_bytes<T, kHd>()));
        return static_cast<std::int64_t>(std::max(per_sm, 1)) * sms;
    }();
    return blocks;
}

// The tensor-core kernels at the head dims they are instantiated for: fp16 / bf16 (mma.sync
// m16n8k16) and fp32 (3xTF32, which copies with cp.async and stores 8 bytes at a time, so it also
// needs 16-byte aligned buffers); false when (T, hd) is not one of them.
template <class T>
bool launch_tensor_cores(T* out, float* lse, const T* qkv, int batch, SequenceSpans spans, QkvHeads heads,
                         const Dropout& dropout, std::uint32_t site, cudaStream_t stream) {
    const int hd = heads.head_dim, n_head = heads.n_head;
    const float scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(hd));
    const auto launch = [&](auto kernel, int rows, int threads, std::size_t bytes) {
        const dim3 grid(static_cast<unsigned>(batch * n_head), static_cast<unsigned>((spans.seq + rows - 1) / rows));
        kernel<<<grid, threads, bytes, stream>>>(out, lse, qkv, spans, heads, scale_log2, dropout, site);
        CUDA_CHECK_LAUNCH();
        return true;
    };
    if constexpr (std::is_same_v<T, float>) {
        if (reinterpret_cast<std::uintptr_t>(qkv) % 16 != 0 || reinterpret_cast<std::uintptr_t>(out) % 16 != 0)
            return false;
        const auto go = [&](auto kernel, std::size_t bytes) {
            return launch(kernel, tf32x3::kRows, tf32x3::kWarps * kWarp, bytes);
        };
        switch (hd) {
            case 32: return go(tf32x3::flash_attention_tf32x3_kernel<32>, tf32x3::shared_bytes<32>());
            case 64: return go(tf32x3::flash_attention_tf32x3_kernel<64>, tf32x3::shared_bytes<64>());
            case 80: return go(tf32x3::flash_attention_tf32x3_kernel<80>, tf32x3::shared_bytes<80>());
            case 96: return go(tf32x3::flash_attention_tf32x3_kernel<96>, tf32x3::shared_bytes<96>());
            case 128: return go(tf32x3::flash_attention_tf32x3_kernel<128>, tf32x3::shared_bytes<128>());
            default: return false;
        }
    } else {
        bool launched = false;
        mma::for_each_mma_head_dim([&](auto head_dim) {
            constexpr int kHd = decltype(head_dim)::value;
            if (hd != kHd) return;
            const auto kernel = dropout.active() ? mma::flash_attention_mma_kernel<T, kHd, true>
                                                 : mma::flash_attention_mma_kernel<T, kHd, false>;
            const std::int64_t batch_heads = static_cast<std::int64_t>(batch) * n_head;
            const std::int64_t blocks = batch_heads * ((spans.seq + mma::kRows - 1) / mma::kRows);
            if (blocks > INT_MAX) throw std::invalid_argument("gpu::flash_attention: batch × n_head × row blocks does not fit the grid");
            const std::int64_t resident =
                dropout.active() ? resident_blocks<T, kHd, true>() : resident_blocks<T, kHd, false>();
            const int group = blocks >= kHeadGroupWaves * resident ? kHeadGroup : static_cast<int>(batch_heads);
            kernel<<<static_cast<unsigned>(blocks), mma::kWarps * kWarp, mma::shared_bytes<T, kHd>(), stream>>>(
                out, lse, qkv, spans, heads, group, scale_log2, dropout, site);
            CUDA_CHECK_LAUNCH();
            launched = true;
        });
        return launched;
    }
}

}  // namespace

template <class T>
void flash_attention(T* out, const T* qkv, int batch, SequenceSpans spans, QkvHeads heads, const Dropout& dropout,
                     std::uint32_t site, cudaStream_t stream, float* lse) {
    const int hd = heads.head_dim;
    if (hd > kFlashAttentionMaxHeadDim) {
        throw std::invalid_argument("gpu::flash_attention: head dimension " + std::to_string(hd) + " is above the " +
                                    std::to_string(kFlashAttentionMaxHeadDim) + " it supports");
    }
    if (heads.n_kv_head < 1 || heads.n_head % heads.n_kv_head != 0)
        throw std::invalid_argument("gpu::flash_attention: " + std::to_string(heads.n_kv_head) +
                                    " kv heads do not divide " + std::to_string(heads.n_head) + " heads");
    if ((spans.offsets == nullptr) != (spans.lengths == nullptr))
        throw std::invalid_argument("gpu::flash_attention: a ragged batch needs both its offsets and its lengths");
    if (static_cast<std::int64_t>(batch) * spans.seq == 0) return;
    if (static_cast<std::int64_t>(batch) * heads.n_head > INT_MAX)
        throw std::invalid_argument("gpu::flash_attention: batch × n_head does not fit the grid");
    const int limit = prepare_kernels<T>();
    const Dropout shaped = dropout.for_shape(spans.seq, dropout.positions);
    if (launch_tensor_cores<T>(out, lse, qkv, batch, spans, heads, shaped, site, stream)) return;
    if (launch_simt<T>(out, lse, qkv, batch, spans, heads, shaped, site, stream)) return;
    launch_with_tile<T>(out, lse, qkv, batch, spans, heads, shaped, site, stream, limit);
}

template <class T>
void flash_attention(T* out, const T* qkv, int batch, int seq, QkvHeads heads, const Dropout& dropout,
                     std::uint32_t site, cudaStream_t stream, float* lse) {
    flash_attention<T>(out, qkv, batch, SequenceSpans::rectangular(seq), heads, dropout, site, stream, lse);
}

template <class T>
void flash_attention(T* out, const T* qkv, int batch, int seq, int c, int n_head, const Dropout& dropout,
                     std::uint32_t site, cudaStream_t stream, float* lse) {
    flash_attention<T>(out, qkv, batch, seq, QkvHeads::multi_head(c, n_head), dropout, site, stream, lse);
}

template void flash_attention<float>(float*, const float*, int, SequenceSpans, QkvHeads, const Dropout&, std::uint32_t,
                                     cudaStream_t, float*);
template void flash_attention<__half>(__half*, const __half*, int, SequenceSpans, QkvHeads, const Dropout&,
                                      std::uint32_t, cudaStream_t, float*);
template void flash_attention<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, int, SequenceSpans, QkvHeads,
                                             const Dropout&, std::uint32_t, cudaStream_t, float*);
template void flash_attention<float>(float*, const float*, int, int, QkvHeads, const Dropout&, std::uint32_t, cudaStream_t,
                                     float*);
template void flash_attention<__half>(__half*, const __half*, int, int, QkvHeads, const Dropout&, std::uint32_t, cudaStream_t,
                                     float*);
template void flash_attention<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, int, int, QkvHeads, const Dropout&, std::uint32_t, cudaStream_t,
                                     float*);
template void flash_attention<float>(float*, const float*, int, int, int, int, const Dropout&, std::uint32_t,
                                     cudaStream_t, float*);
template void flash_attention<__half>(__half*, const __half*, int, int, int, int, const Dropout&, std::uint32_t,
                                      cudaStream_t, float*);
template void flash_attention<__nv_bfloat16>(__nv_bfloat16*, const __nv_bfloat16*, int, int, int, int,
                                             const Dropout&, std::uint32_t, cudaStream_t, float*);

}  // namespace sweetspot::gpu
