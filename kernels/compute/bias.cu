#include "kernels/compute/bias.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"

namespace sweetspot::gpu {

namespace {

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

}  // namespace

template <class T>
void launch_add_bias(T* y, const T* bias, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
    if (rows * cols == 0) return;
    add_bias_kernel<T><<<elementwise_blocks(rows * cols), kBlock, 0, stream>>>(y, bias, rows, cols);
    CUDA_CHECK_LAUNCH();
}


template <class T>
void launch_bias_backward(T* dbias, const T* dout, std::int64_t rows, int cols, float* scratch, cudaStream_t stream) {
    launch_column_sum<T, T>(dbias, dout, rows, cols, scratch, stream);
}

#define SWEETSPOT_INSTANTIATE(T)                                                                \
    template void launch_add_bias<T>(T*, const T*, std::int64_t, std::int64_t, cudaStream_t); \
    template void launch_bias_backward<T>(T*, const T*, std::int64_t, int, float*, cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
