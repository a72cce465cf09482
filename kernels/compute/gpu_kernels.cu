// The baseline kernels: one per op, llm.c style. Loads and stores are in T (float, __half or
// __nv_bfloat16); every sum, exp and tanh is in fp32, so the half types only lose precision
// where a value is stored, as PyTorch's autocast-free half models do.
#include "kernels/compute/gpu_kernels.cuh"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"

namespace sweetspot::gpu {

namespace {

// Threads per block of the element-wise kernels and the softmax.
constexpr int kBlock = 256;
// Element-wise grids are capped (each thread then strides over the rest): plenty of blocks to
// fill an H100, and no grid-size limit to think about for B·T·vocab sized buffers.
constexpr std::int64_t kMaxElementwiseBlocks = 65536;

// ---- reductions --------------------------------------------------------------------------

// Reduces v over the whole block and returns the result to every thread. blockDim.x must be a
// multiple of 32 (at most 1024). `shared` holds one float per warp; the trailing barrier lets
// the caller reduce again with the same array straight away.
template <bool IsMax>
__device__ float block_reduce(float v, float* shared) {
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    const int warp = static_cast<int>(threadIdx.x) / kWarp;
    const int n_warps = static_cast<int>(blockDim.x) / kWarp;
    v = IsMax ? warp_max(v) : warp_sum(v);
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    const float identity = IsMax ? -INFINITY : 0.0f;
    float r = lane < n_warps ? shared[lane] : identity;
    r = IsMax ? warp_max(r) : warp_sum(r);  // every warp reduces the partials: all threads get it
    __syncthreads();
    return r;
}

int elementwise_blocks(std::int64_t n) {
    return static_cast<int>(std::min((n + kBlock - 1) / kBlock, kMaxElementwiseBlocks));
}

// ---- kernels -------------------------------------------------------------------------------

// x[row, i] = wte[tokens[row], i] + wpe[row % seq, i], one thread per element (grid-stride).
// Rows are (batch, position) pairs, so consecutive threads read consecutive elements of one
// embedding row: coalesced gathers without a per-row launch.
template <class T>
__global__ void embedding_kernel(T* x, const std::int32_t* tokens, const T* wte, const T* wpe, std::int64_t bt,
                                 int seq, int c) {
    const std::int64_t n = bt * c;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t row = idx / c;
        const std::int64_t i = idx % c;
        const std::int64_t tok = tokens[row];
        const std::int64_t pos = row % seq;
        x[idx] = from_f32<T>(to_f32(wte[tok * c + i]) + to_f32(wpe[pos * c + i]));
    }
}

// One warp per row (llm.c layernorm_forward_kernel3): rows are short (c ≤ a few thousand),
// so a warp-shuffle reduction needs no shared memory and no block barrier. Two passes in fp32,
// mean then centred squares, as the CPU reference: no E[x²] − E[x]² cancellation. The row is
// re-read from global memory (L1/L2 hits) instead of being held in registers, so any c works.
template <class T>
__global__ void layernorm_kernel(T* out, const T* in, const T* w, const T* b, int rows, int c, float eps) {
    const int warps_per_block = static_cast<int>(blockDim.x) / kWarp;
    const int row = static_cast<int>(blockIdx.x) * warps_per_block + static_cast<int>(threadIdx.x) / kWarp;
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    if (row >= rows) return;  // the whole warp leaves together, so the shuffles stay full-mask
    const T* x = in + static_cast<std::int64_t>(row) * c;
    T* y = out + static_cast<std::int64_t>(row) * c;

    float sum = 0.0f;
    for (int i = lane; i < c; i += kWarp) sum += to_f32(x[i]);
    const float mean = warp_sum(sum) / static_cast<float>(c);

    float sq = 0.0f;
    for (int i = lane; i < c; i += kWarp) {
        const float d = to_f32(x[i]) - mean;
        sq += d * d;
    }
    const float var = warp_sum(sq) / static_cast<float>(c);
    const float rstd = 1.0f / sqrtf(var + eps);

    for (int i = lane; i < c; i += kWarp) {
        y[i] = from_f32<T>((to_f32(x[i]) - mean) * rstd * to_f32(w[i]) + to_f32(b[i]));
    }
}

// y[r, j] += bias[j]. A separate pass after the GEMM (baseline: no epilogue fusion); the bias
// row is tiny and stays in L1/L2 while every row reads it.
template <class T>
__global__ void add_bias_kernel(T* y, const T* bias, std::int64_t rows, std::int64_t cols) {
    const std::int64_t n = rows * cols;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        y[idx] = from_f32<T>(to_f32(y[idx]) + to_f32(bias[idx % cols]));
    }
}

// GPT-2's tanh-approximated GELU, in place on the MLP's [B·T, 4C] activations: no extra buffer.
template <class T>
__global__ void gelu_tanh_kernel(T* x, std::int64_t n) {
    const float sqrt_2_over_pi = 0.7978845608028654f;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const float v = to_f32(x[idx]);
        x[idx] = from_f32<T>(0.5f * v * (1.0f + tanhf(sqrt_2_over_pi * (v + 0.044715f * v * v * v))));
    }
}

// x += y: the residual stream absorbs a sub-layer's output in place.
template <class T>
__global__ void residual_add_kernel(T* x, const T* y, std::int64_t n) {
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        x[idx] = from_f32<T>(to_f32(x[idx]) + to_f32(y[idx]));
    }
}

// Each element times its dropout factor at `site` (0 or 1 / (1 − p)): the baseline's dropout, a
// pass of its own after the op it follows. x is [rows, width]: activations (kProbabilities false,
// row = b·seq + t) or attention probabilities (true, row = (b·H + h)·seq + t, width = seq).
template <class T, bool kProbabilities>
__global__ void dropout_kernel(T* x, std::int64_t rows, int width, Dropout d, std::uint32_t site) {
    const std::int64_t n = rows * width;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const auto row = static_cast<std::uint64_t>(idx / width), col = static_cast<std::uint64_t>(idx % width);
        const float f = kProbabilities ? d.probability_factor(site, row, col)
                                       : d.row_factor(site, row, static_cast<std::uint64_t>(width), col);
        x[idx] = from_f32<T>(to_f32(x[idx]) * f);
    }
}

// The causal mask on its own (baseline): scores[r, j] = −inf for j > r % seq, in place, so the
// plain softmax that follows gives those columns exact zeros.
template <class T>
__global__ void causal_mask_kernel(T* scores, std::int64_t rows, int seq) {
    const std::int64_t n = rows * seq;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t r = idx / seq;
        if (idx % seq > r % seq) scores[idx] = from_f32<T>(-INFINITY);
    }
}

// One block per score row [B·H·T rows, T columns], in place. Three sweeps over the row (max,
// sum of exp, write), all in fp32 from the stored T values; exp(v − max) cannot overflow. The
// scores arrive already scaled by 1/sqrt(head_dim) (folded into the QKᵀ GEMM's alpha).
// kFused (the `softmax` fusion): the causal mask and the attention dropout happen here too. Row
// r is query position i = r % seq; only columns 0..i are read, the columns after i are written
// as exact zeros (so the P·V GEMM over the full row adds nothing for them), and each kept
// probability is scaled by its dropout factor. Otherwise (baseline) the row was masked by
// causal_mask_kernel and the dropout is a pass of its own: the softmax runs over every column,
// where the masked −inf give exp(−inf) = 0, so both forms compute the same numbers.
template <class T, bool kFused>
__global__ void softmax_kernel(T* scores, int seq, Dropout d, std::uint32_t site) {
    __shared__ float shared[kWarp];
    const std::int64_t r = blockIdx.x;
    const int last = kFused ? static_cast<int>(r % seq) : seq - 1;
    T* row = scores + r * seq;

    float row_max = -INFINITY;
    for (int j = static_cast<int>(threadIdx.x); j <= last; j += static_cast<int>(blockDim.x)) {
        row_max = fmaxf(row_max, to_f32(row[j]));
    }
    row_max = block_reduce<true>(row_max, shared);

    float sum = 0.0f;
    for (int j = static_cast<int>(threadIdx.x); j <= last; j += static_cast<int>(blockDim.x)) {
        sum += expf(to_f32(row[j]) - row_max);
    }
    sum = block_reduce<false>(sum, shared);
    const float inv_sum = 1.0f / sum;

    // Every read of the row above happened before the barriers in block_reduce, so writing in
    // place cannot change what another thread reads.
    for (int j = static_cast<int>(threadIdx.x); j < seq; j += static_cast<int>(blockDim.x)) {
        if (j > last) {
            row[j] = from_f32<T>(0.0f);
            continue;
        }
        const T p = from_f32<T>(expf(to_f32(row[j]) - row_max) * inv_sum);
        // Fused, the probability is rounded to T before its dropout, as the separate pass sees it.
        row[j] = kFused && d.active()
                     ? from_f32<T>(to_f32(p) * d.probability_factor(site, static_cast<std::uint64_t>(r),
                                                                     static_cast<std::uint64_t>(j)))
                     : p;
    }
}

// x + dropout(y) at element i of a row, rounded to T where the separate kernels store: the
// dropped value after the dropout pass, the sum after the residual add. __fmul_rn / __fadd_rn
// round each step separately, as those kernels do, never contracted into one fused multiply-add
// (which would round once and differ in the last bit). The mask's 64-bit index arithmetic only
// when dropout is on: it costs more than the add.
template <class T>
__device__ T residual_sum(const T* xr, const T* yr, const Dropout& d, std::uint32_t site, int row, int c, int i) {
    float dropped = to_f32(yr[i]);
    if (d.active()) {
        const float f = d.row_factor(site, static_cast<std::uint64_t>(row), static_cast<std::uint64_t>(c),
                                     static_cast<std::uint64_t>(i));
        dropped = to_f32(from_f32<T>(__fmul_rn(dropped, f)));
    }
    return from_f32<T>(__fadd_rn(to_f32(xr[i]), dropped));
}

// The `residual_ln` fusion, one warp per row: x += dropout(y) on the residual stream, then
// out = LayerNorm(x) · w + b, in one kernel instead of three (dropout, residual add, LayerNorm)
// and without the round trips of x and y through memory between them. The sum is recomputed in
// each of the three passes rather than stored in the first and read back: a row the kernel has
// written is read from L2 (a store evicts it from L1), one it has only read from L1, and the
// recomputation is one add. x is written once, in the last pass. Same reduction order and
// rounding as residual_add_kernel followed by layernorm_kernel: the same result bit for bit.
template <class T>
__global__ void residual_layernorm_kernel(T* out, T* x, const T* y, Dropout d, std::uint32_t site, const T* w,
                                          const T* b, int rows, int c, float eps) {
    const int warps_per_block = static_cast<int>(blockDim.x) / kWarp;
    const int row = static_cast<int>(blockIdx.x) * warps_per_block + static_cast<int>(threadIdx.x) / kWarp;
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    if (row >= rows) return;  // the whole warp leaves together, so the shuffles stay full-mask
    T* xr = x + static_cast<std::int64_t>(row) * c;
    const T* yr = y + static_cast<std::int64_t>(row) * c;
    T* o = out + static_cast<std::int64_t>(row) * c;

    float sum = 0.0f;
    for (int i = lane; i < c; i += kWarp) sum += to_f32(residual_sum(xr, yr, d, site, row, c, i));
    const float mean = warp_sum(sum) / static_cast<float>(c);

    float sq = 0.0f;
    for (int i = lane; i < c; i += kWarp) {
        const float dv = to_f32(residual_sum(xr, yr, d, site, row, c, i)) - mean;
        sq += dv * dv;
    }
    const float var = warp_sum(sq) / static_cast<float>(c);
    const float rstd = 1.0f / sqrtf(var + eps);

    // Each lane reads element i before it writes it, and no other lane touches i: in place is safe.
    for (int i = lane; i < c; i += kWarp) {
        const T v = residual_sum(xr, yr, d, site, row, c, i);
        xr[i] = v;
        o[i] = from_f32<T>((to_f32(v) - mean) * rstd * to_f32(w[i]) + to_f32(b[i]));
    }
}

// *count += how many of x's n values are NaN or infinite. The cell's output check over every
// logit: a [B·T, V] buffer can be tens of GB, which this reads once at memory bandwidth instead
// of copying it to the host. One atomic per warp that found any.
template <class T>
__global__ void count_nonfinite_kernel(const T* x, std::int64_t n, unsigned long long* count) {
    unsigned int found = 0;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        found += isfinite(to_f32(x[idx])) ? 0u : 1u;
    }
    found = __reduce_add_sync(0xFFFFFFFFu, found);  // every lane leaves the loop before this
    if (threadIdx.x % kWarp == 0 && found > 0) atomicAdd(count, static_cast<unsigned long long>(found));
}

}  // namespace

// ---- launchers -----------------------------------------------------------------------------

template <class T>
void launch_embedding(T* x, const std::int32_t* tokens, const T* wte, const T* wpe, int batch, int seq, int c,
                      cudaStream_t stream) {
    const std::int64_t bt = static_cast<std::int64_t>(batch) * seq;
    if (bt * c == 0) return;
    embedding_kernel<T><<<elementwise_blocks(bt * c), kBlock, 0, stream>>>(x, tokens, wte, wpe, bt, seq, c);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_layernorm(T* out, const T* in, const T* w, const T* b, int rows, int c, float eps, cudaStream_t stream) {
    if (rows == 0) return;
    const int warps_per_block = kBlock / kWarp;
    const int blocks = (rows + warps_per_block - 1) / warps_per_block;
    layernorm_kernel<T><<<blocks, kBlock, 0, stream>>>(out, in, w, b, rows, c, eps);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_add_bias(T* y, const T* bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
    if (rows * cols == 0) return;
    add_bias_kernel<T><<<elementwise_blocks(rows * cols), kBlock, 0, stream>>>(y, bias, rows, cols);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_gelu_tanh(T* x, std::int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    gelu_tanh_kernel<T><<<elementwise_blocks(n), kBlock, 0, stream>>>(x, n);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_residual_add(T* x, const T* y, std::int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    residual_add_kernel<T><<<elementwise_blocks(n), kBlock, 0, stream>>>(x, y, n);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_count_nonfinite(const T* x, std::int64_t n, unsigned long long* count, cudaStream_t stream) {
    CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof *count, stream));
    if (n == 0) return;
    count_nonfinite_kernel<T><<<elementwise_blocks(n), kBlock, 0, stream>>>(x, n, count);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_dropout(T* x, std::int64_t rows, int width, const Dropout& d, std::uint32_t site, cudaStream_t stream) {
    if (rows * width == 0 || !d.active()) return;
    dropout_kernel<T, false><<<elementwise_blocks(rows * width), kBlock, 0, stream>>>(x, rows, width, d, site);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_dropout_probabilities(T* p, std::int64_t rows, const Dropout& d, std::uint32_t site, cudaStream_t stream) {
    if (rows == 0 || !d.active()) return;
    dropout_kernel<T, true><<<elementwise_blocks(rows * d.seq), kBlock, 0, stream>>>(p, rows, d.seq, d, site);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_causal_mask(T* scores, std::int64_t rows, int seq, cudaStream_t stream) {
    if (rows == 0) return;
    causal_mask_kernel<T><<<elementwise_blocks(rows * seq), kBlock, 0, stream>>>(scores, rows, seq);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_softmax(T* scores, std::int64_t rows, int seq, cudaStream_t stream) {
    if (rows == 0) return;
    // rows = B·H·T ≤ 2^31 − 1 for every shape the harness runs (gridDim.x's limit).
    softmax_kernel<T, false><<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(scores, seq, Dropout{}, 0);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_causal_softmax_dropout(T* scores, std::int64_t rows, int seq, const Dropout& d, std::uint32_t site,
                                   cudaStream_t stream) {
    if (rows == 0) return;
    softmax_kernel<T, true><<<static_cast<unsigned>(rows), kBlock, 0, stream>>>(scores, seq, d, site);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_residual_layernorm(T* out, T* x, const T* y, const Dropout& d, std::uint32_t site, const T* w, const T* b,
                               int rows, int c, float eps, cudaStream_t stream) {
    if (rows == 0) return;
    const int warps_per_block = kBlock / kWarp;
    const int blocks = (rows + warps_per_block - 1) / warps_per_block;
    residual_layernorm_kernel<T><<<blocks, kBlock, 0, stream>>>(out, x, y, d, site, w, b, rows, c, eps);
    CUDA_CHECK_LAUNCH();
}

// ---- explicit instantiations: fp32, fp16, bf16 ----------------------------------------------
#define SWEETSPOT_INSTANTIATE_KERNELS(T)                                                                        \
    template void launch_embedding<T>(T*, const std::int32_t*, const T*, const T*, int, int, int, cudaStream_t); \
    template void launch_layernorm<T>(T*, const T*, const T*, const T*, int, int, float, cudaStream_t);          \
    template void launch_add_bias<T>(T*, const T*, std::int64_t, std::int64_t, cudaStream_t);                    \
    template void launch_gelu_tanh<T>(T*, std::int64_t, cudaStream_t);                                           \
    template void launch_residual_add<T>(T*, const T*, std::int64_t, cudaStream_t);                              \
    template void launch_count_nonfinite<T>(const T*, std::int64_t, unsigned long long*, cudaStream_t);          \
    template void launch_dropout<T>(T*, std::int64_t, int, const Dropout&, std::uint32_t, cudaStream_t);         \
    template void launch_dropout_probabilities<T>(T*, std::int64_t, const Dropout&, std::uint32_t, cudaStream_t); \
    template void launch_causal_mask<T>(T*, std::int64_t, int, cudaStream_t);                                    \
    template void launch_softmax<T>(T*, std::int64_t, int, cudaStream_t);                                        \
    template void launch_causal_softmax_dropout<T>(T*, std::int64_t, int, const Dropout&, std::uint32_t,         \
                                                   cudaStream_t);                                                \
    template void launch_residual_layernorm<T>(T*, T*, const T*, const Dropout&, std::uint32_t, const T*,        \
                                               const T*, int, int, float, cudaStream_t);

SWEETSPOT_INSTANTIATE_KERNELS(float)
SWEETSPOT_INSTANTIATE_KERNELS(__half)
SWEETSPOT_INSTANTIATE_KERNELS(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE_KERNELS

}  // namespace sweetspot::gpu
