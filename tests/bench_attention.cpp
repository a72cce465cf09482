// The attention core on its own: baseline (cuBLAS QKᵀ, mask, softmax, cuBLAS ·V over a [seq, seq]
// buffer) against the flash_attention kernel, causal, per dtype, head dimension and sequence
// length, in ms and TFLOP/s (4·batch·heads·seq²·hd / 2 flops: the causal half of QKᵀ and ·V, as
// FlashAttention's papers count). Medians of 20 timed runs after 3 warm-ups, CUDA events.
//   bench_attention            the table for docs/benchmarks.md
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <random>
#include <vector>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/gemm.hpp"
#include "kernels/compute/gpu_attention.hpp"
#include "kernels/compute/gpu_dtype.hpp"
#include "kernels/model/dtype.hpp"
#include "ops/op_support.hpp"

using namespace sweetspot;

namespace {

struct Shape {
    int batch, n_head, seq, hd;
};

template <class T>
void bench(const Shape& s, cudaStream_t stream) {
    const DType dtype = gpu::dtype_of<T>();
    const int c = s.n_head * s.hd;
    const std::int64_t rows = static_cast<std::int64_t>(s.batch) * s.seq;
    // Non-zero inputs in [-1, 1] (never time on zeros), rounded to the dtype.
    std::vector<float> values(static_cast<std::size_t>(rows * 3 * c));
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& v : values) v = dist(gen);
    std::vector<std::byte> bytes(values.size() * dtype_size(dtype));
    convert_from_f32(values, dtype, bytes.data());
    DeviceMemory qkv = allocate_device(static_cast<std::int64_t>(bytes.size()));
    CUDA_CHECK(cudaMemcpy(qkv.get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    DeviceMemory out = allocate_device(rows * c * static_cast<std::int64_t>(dtype_size(dtype)));
    DeviceMemory scores = allocate_device(static_cast<std::int64_t>(s.batch) * s.n_head * s.seq * s.seq *
                                          static_cast<std::int64_t>(dtype_size(dtype)));
    Gemm gemm(dtype, stream, Fp32Gemm::exact);
    T* o = reinterpret_cast<T*>(out.get());
    const T* q = reinterpret_cast<const T*>(qkv.get());

    const double baseline = ops::median_ms(stream, [&] {
        gpu::attention<T>(gemm, o, reinterpret_cast<T*>(scores.get()), q, s.batch, s.seq, c, s.n_head);
    });
    const double flash = ops::median_ms(stream, [&] {
        gpu::flash_attention<T>(o, q, s.batch, s.seq, c, s.n_head, Dropout{}, 0, stream);
    });
    const double flops = 4.0 * s.batch * s.n_head * static_cast<double>(s.seq) * s.seq * s.hd / 2.0;
    std::printf("| %s | %d | %d | %d | %d | %.3f | %.1f | %.3f | %.1f |\n", std::string(enum_name(dtype)).c_str(),
                s.batch, s.n_head, s.seq, s.hd, baseline, flops / baseline / 1e9, flash, flops / flash / 1e9);
}

}  // namespace

int main() {
    const CudaStream stream;
    std::printf("| dtype | batch | heads | seq | head dim | baseline ms | baseline TFLOP/s | flash ms | flash TFLOP/s |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    // FlashAttention-2's benchmark shapes (16k tokens, 2048 channels: batch = 16384 / seq, heads =
    // 2048 / head dim), then one layer of GPT-2 1.5B, GPT-3 6.7B and GPT-3 13B at batch 1, seq 1024.
    std::vector<Shape> shapes;
    for (const int hd : {64, 128}) {
        for (const int seq : {512, 1024, 2048}) shapes.push_back(Shape{16384 / seq, 2048 / hd, seq, hd});
    }
    for (const Shape& s : {Shape{1, 25, 1024, 64}, Shape{1, 32, 1024, 128}, Shape{1, 40, 1024, 128}}) shapes.push_back(s);
    for (const Shape& s : shapes) {
        bench<__half>(s, stream.get());
        bench<__nv_bfloat16>(s, stream.get());
        bench<float>(s, stream.get());
    }
    return 0;
}
