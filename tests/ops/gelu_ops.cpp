// GPT-2's GELU: the forward (launch_gelu_tanh) and its backward (launch_gelu_tanh_backward).
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/gelu.cuh"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

// dims: n.
template <class T>
class GeluCase final : public OpCase {
public:
    GeluCase(const OpShape& shape, cudaStream_t stream)
        : n_(shape.dims[0]),
          // ±6 reaches both tails, where tanh saturates and GELU tends to x and to 0.
          x_(random_values(as_size(n_), dtype, kSeed, 0.01f, 6.0f, Sign::either)),
          d_x_(x_, stream) {}

    void run(cudaStream_t stream) override { gpu::launch_gelu_tanh<T>(d_x_.get(), n_, stream); }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want = x_;
        cpu::gelu_tanh(want.data(), n_);
        return compare("x", d_x_.to_host(stream), want);
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::int64_t n_;
    std::vector<float> x_;
    DeviceArray<T> d_x_;
};

// dims: n.
template <class T>
class GeluBackwardCase final : public OpCase {
public:
    GeluBackwardCase(const OpShape& shape, cudaStream_t stream)
        : n_(shape.dims[0]),
          x_(random_values(as_size(n_), dtype, kSeed, 0.01f, 6.0f, Sign::either)),
          dx_(random_values(as_size(n_), dtype, kSeed + 1, 0.01f, 1.0f, Sign::either)),
          d_x_(x_, stream),
          d_dx_(dx_, stream) {}

    void run(cudaStream_t stream) override { gpu::launch_gelu_tanh_backward<T>(d_dx_.get(), d_x_.get(), n_, stream); }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want = dx_;
        cpu::gelu_tanh_backward(want.data(), x_.data(), n_);
        return compare("dx", d_dx_.to_host(stream), want);
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::int64_t n_;
    std::vector<float> x_, dx_;
    DeviceArray<T> d_x_, d_dx_;
};

}  // namespace

std::vector<OpEntry> gelu_ops() {
    std::vector<OpEntry> entries;
    entries.push_back(OpEntry{
        .name = "gelu_tanh",
        .family = "gelu",
        .test_shapes = {n_shape(1), n_shape(4 * 75 * 7), n_shape(kPastGridCap)},
        // The MLP's [B·T, 4c], GPT-2 small and 1.5B at batch 8, seq 1024.
        .bench_shapes = {n_shape(8 * 1024 * 4 * 768), n_shape(8 * 1024 * 4 * 1600)},
        .tolerance = store_tolerance,
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(2.0 * static_cast<double>(s.dims[0]), dtype);  // x read and written
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<GeluCase>(dtype, s, stream);
        },
    });
    entries.push_back(OpEntry{
        .name = "gelu_tanh_backward",
        .family = "gelu",
        .test_shapes = {n_shape(1), n_shape(4 * 75 * 7), n_shape(kPastGridCap)},
        .bench_shapes = {n_shape(8 * 1024 * 4 * 768), n_shape(8 * 1024 * 4 * 1600)},
        // One store of dx · gelu'(x). In fp32 the derivative's 1 − tanh² loses tanhf's 2 ulp to
        // cancellation in the tails (≲ 5e-7 absolute), which its factor 0.5·v·√(2/π)·(1 + 0.134·v²)
        // (≤ 14 at |v| ≤ 6) scales to ≲ 7e-6 of max|dx·gelu'| ≈ 1: another 1e-5 on the store
        // tolerance.
        .tolerance = [](DType dtype) { return store_tolerance(dtype) + 1e-5; },
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(3.0 * static_cast<double>(s.dims[0]), dtype);  // x, dx read, dx written
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<GeluBackwardCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
