#include "kernels/compute/layernorm.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"

namespace sweetspot::gpu {

namespace {

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

// The backward, one block per row at a time (rows blockIdx.x, + gridDim.x, ...): thread t owns
// columns t, t + 256, ... of every row, so its share of the block's dw and db accumulates in
// shared memory without atomics and in row order. Per row: the forward's mean and rstd (two
// passes, as layernorm_kernel), then mean(dy·w) and mean(dy·w·x̂) over the row, then
// dx += rstd · (dy·w − mean(dy·w) − x̂ · mean(dy·w·x̂)), with x̂ = (x − mean) · rstd. At the end
// each block writes its partial dw and db to partials [gridDim.x, 2c]. Shared memory: 2c floats.
template <class T>
__global__ void layernorm_backward_kernel(T* dx, float* partials, const T* dout, const T* in, const T* w, int rows,
                                          int c, float eps) {
    extern __shared__ float accumulated[];  // dw [c], then db [c]
    __shared__ float reduce[kWarp];
    const int t = static_cast<int>(threadIdx.x), step = static_cast<int>(blockDim.x);
    // Thread t accumulates dw[i] and db[i] for its columns i; db[i] = accumulated[c + i] may have
    // been zeroed (and is finally written) by another thread, hence the two barriers.
    for (int i = t; i < 2 * c; i += step) accumulated[i] = 0.0f;
    __syncthreads();
    for (int row = static_cast<int>(blockIdx.x); row < rows; row += static_cast<int>(gridDim.x)) {
        const T* x = in + static_cast<std::int64_t>(row) * c;
        const T* dy = dout + static_cast<std::int64_t>(row) * c;
        T* dxr = dx + static_cast<std::int64_t>(row) * c;

        float sum = 0.0f;
        for (int i = t; i < c; i += step) sum += to_f32(x[i]);
        const float mean = block_reduce<false>(sum, reduce) / static_cast<float>(c);
        float sq = 0.0f;
        for (int i = t; i < c; i += step) {
            const float d = to_f32(x[i]) - mean;
            sq += d * d;
        }
        const float rstd = 1.0f / sqrtf(block_reduce<false>(sq, reduce) / static_cast<float>(c) + eps);

        float g = 0.0f, gx = 0.0f;
        for (int i = t; i < c; i += step) {
            const float xhat = (to_f32(x[i]) - mean) * rstd;
            const float dyi = to_f32(dy[i]);
            const float dyw = dyi * to_f32(w[i]);
            g += dyw;
            gx += dyw * xhat;
            accumulated[i] += dyi * xhat;
            accumulated[c + i] += dyi;
        }
        const float mean_g = block_reduce<false>(g, reduce) / static_cast<float>(c);
        const float mean_gx = block_reduce<false>(gx, reduce) / static_cast<float>(c);
        for (int i = t; i < c; i += step) {
            const float xhat = (to_f32(x[i]) - mean) * rstd;
            const float dyw = to_f32(dy[i]) * to_f32(w[i]);
            dxr[i] = from_f32<T>(to_f32(dxr[i]) + rstd * (dyw - mean_g - xhat * mean_gx));
        }
    }
    __syncthreads();
    float* partial = partials + static_cast<std::int64_t>(blockIdx.x) * 2 * c;
    for (int i = t; i < 2 * c; i += step) partial[i] = accumulated[i];
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

}  // namespace

template <class T>
void launch_layernorm(T* out, const T* in, const T* w, const T* b, int rows, int c, float eps, cudaStream_t stream) {
    if (rows == 0) return;
    const int warps_per_block = kBlock / kWarp;
    const int blocks = (rows + warps_per_block - 1) / warps_per_block;
    layernorm_kernel<T><<<blocks, kBlock, 0, stream>>>(out, in, w, b, rows, c, eps);
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

template <class T>
void launch_layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* in, const T* w, int rows, int c, float eps,
                               float* scratch, cudaStream_t stream) {
    if (rows == 0) return;
    const int blocks = std::min(rows, kLayerNormBackwardBlocks);
    const std::size_t shared = 2 * static_cast<std::size_t>(c) * sizeof(float);
    // Above 48 KiB (c > 6144) a kernel must opt in to more dynamic shared memory.
    if (shared > 48 * 1024) {
        CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared)));
    }
    layernorm_backward_kernel<T><<<blocks, kBlock, shared, stream>>>(dx, scratch, dout, in, w, rows, c, eps);
    CUDA_CHECK_LAUNCH();
    launch_column_sum_once<float, T>(dw, scratch, blocks, c, 2 * static_cast<std::int64_t>(c), stream);
    launch_column_sum_once<float, T>(db, scratch + c, blocks, c, 2 * static_cast<std::int64_t>(c), stream);
}

#define SWEETSPOT_INSTANTIATE(T) \
    template void launch_layernorm<T>(T*, const T*, const T*, const T*, int, int, float, cudaStream_t); \
    template void launch_layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, float, float*, \
                                               cudaStream_t);                                              \
    template void launch_residual_layernorm<T>(T*, T*, const T*, const Dropout&, std::uint32_t, const T*, const T*, int, int, float, cudaStream_t);  

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
