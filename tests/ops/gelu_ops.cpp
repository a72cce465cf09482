// GPT-2's GELU: the forward (launch_gelu_tanh) and its backward (launch_gelu_tanh_backward); Tempo's
// in-place GELU, the forward keeping the output and a branch bit (launch_gelu_tanh_with_branch) and
// the backward from them (launch_gelu_tanh_backward_from_output).
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/gelu.cuh"
#include "kernels/compute/gelu_from_output.hpp"
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

// The branch bits in device memory, as bytes.
class DeviceBits {
public:
    // Uploads `bytes`.
    DeviceBits(const std::vector<std::uint8_t>& bytes, cudaStream_t stream)
        : n_(bytes.size()), memory_(allocate_device(static_cast<std::int64_t>(n_))) {
        CUDA_CHECK(cudaMemcpyAsync(get(), bytes.data(), n_, cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    // n bytes of 0xA5, bits that a kernel writing all of them, trailing zeros included, changes.
    DeviceBits(std::size_t n, cudaStream_t stream) : n_(n), memory_(allocate_device(static_cast<std::int64_t>(n_))) {
        CUDA_CHECK(cudaMemsetAsync(get(), 0xA5, n_, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }

    std::uint8_t* get() const { return reinterpret_cast<std::uint8_t*>(memory_.get()); }

    // The bytes as floats, for require_equal.
    std::vector<float> to_host(cudaStream_t stream) const {
        std::vector<std::uint8_t> bytes(n_);
        CUDA_CHECK(cudaMemcpyAsync(bytes.data(), get(), n_, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return {bytes.begin(), bytes.end()};
    }

private:
    std::size_t n_;
    DeviceMemory memory_;
};

// ±6 reaches both tails and, with about 2e-4 of the elements within 1e-3 of it, the minimum x0 ≈ -0.75,
// where the branch bit decides.
std::vector<float> branch_inputs(std::int64_t n, DType dtype) {
    return random_values(as_size(n), dtype, kSeed, 0.01f, 6.0f, Sign::either);
}

// dims: n.
template <class T>
class GeluWithBranchCase final : public OpCase {
public:
    GeluWithBranchCase(const OpShape& shape, cudaStream_t stream)
        : n_(shape.dims[0]),
          x_(branch_inputs(n_, dtype)),
          d_x_(x_, stream),
          d_bits_(as_size(gelu_output::branch_bytes(n_)), stream) {}

    void run(cudaStream_t stream) override { gpu::launch_gelu_tanh_with_branch<T>(d_x_.get(), d_bits_.get(), n_, stream); }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want = x_;
        std::vector<std::uint8_t> bits(as_size(gelu_output::branch_bytes(n_)));
        cpu::gelu_tanh_with_branch(want.data(), bits.data(), n_);
        OpError error = compare("y", d_x_.to_host(stream), want);
        error.include(require_equal("the branch bits", d_bits_.to_host(stream), {bits.begin(), bits.end()}));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::int64_t n_;
    std::vector<float> x_;
    DeviceArray<T> d_x_;
    DeviceBits d_bits_;
};

// What the in-place GELU's forward keeps of branch_inputs: y (in fp32, rounded to the dtype) and bits.
struct KeptOutput {
    std::vector<float> y;
    std::vector<std::uint8_t> bits;
};
KeptOutput kept_output(std::int64_t n, DType dtype) {
    KeptOutput kept{branch_inputs(n, dtype), std::vector<std::uint8_t>(as_size(gelu_output::branch_bytes(n)))};
    cpu::gelu_tanh_with_branch(kept.y.data(), kept.bits.data(), n);
    round_through_dtype(kept.y, dtype);
    return kept;
}

// dims: n. In fp16 and bf16 the derivative table is made once, as the training step makes it,
// and the check covers it through the values the elements read; the benchmark times the backward.
template <class T>
class GeluBackwardFromOutputCase final : public OpCase {
public:
    GeluBackwardFromOutputCase(const OpShape& shape, cudaStream_t stream)
        : n_(shape.dims[0]),
          kept_(kept_output(n_, dtype)),
          dx_(random_values(as_size(n_), dtype, kSeed + 1, 0.01f, 1.0f, Sign::either)),
          d_y_(kept_.y, stream),
          d_bits_(kept_.bits, stream),
          d_dx_(dx_, stream) {
        if constexpr (!std::is_same_v<T, float>) {
            table_.emplace(as_size(gelu_output::kDerivativeTableSize), stream);
            gpu::launch_gelu_derivative_table<T>(table_->get(), stream);
        }
    }

    void run(cudaStream_t stream) override {
        gpu::launch_gelu_tanh_backward_from_output<T>(d_dx_.get(), d_y_.get(), d_bits_.get(),
                                                      table_ ? table_->get() : nullptr, n_, stream);
    }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want = dx_;
        cpu::gelu_tanh_backward_from_output(want.data(), kept_.y.data(), kept_.bits.data(), n_);
        return compare("dx", d_dx_.to_host(stream), want);
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::int64_t n_;
    KeptOutput kept_;
    std::vector<float> dx_;
    DeviceArray<T> d_y_;
    DeviceBits d_bits_;
    DeviceArray<T> d_dx_;
    std::optional<DeviceArray<float>> table_;
};

// What the in-place GELU's kernels move besides their values: one bit an element.
OpCost with_bits(OpCost cost, std::int64_t n) {
    cost.bytes += static_cast<double>(gelu_output::branch_bytes(n));
    return cost;
}

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
    // n not a multiple of 8 (a last byte of bits in part) nor of the 256-thread block, one element,
    // past the grid cap; benchmarked at GPT-2 1.5B's MLP [B·T, 4c] at batch 8 (beside gelu_tanh's
    // rows) and 16, seq 1024.
    const std::vector<OpShape> branch_test_shapes = {n_shape(1), n_shape(13), n_shape(4 * 75 * 7),
                                                     n_shape(kPastGridCap)};
    const std::vector<OpShape> branch_bench_shapes = {n_shape(8 * 1024 * 4 * 1600), n_shape(16 * 1024 * 4 * 1600)};
    entries.push_back(OpEntry{
        .name = "gelu_tanh_with_branch",
        .family = "gelu",
        .test_shapes = branch_test_shapes,
        .bench_shapes = branch_bench_shapes,
        // y as gelu_tanh's; the bits compare x with a constant, exact on both sides.
        .tolerance = store_tolerance,
        .cost = [](const OpShape& s, DType dtype) {
            return with_bits(memory_cost(2.0 * static_cast<double>(s.dims[0]), dtype), s.dims[0]);  // x read, y written
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<GeluWithBranchCase>(dtype, s, stream);
        },
    });
    entries.push_back(OpEntry{
        .name = "gelu_tanh_backward_from_output",
        .family = "gelu",
        .test_shapes = branch_test_shapes,
        .bench_shapes = branch_bench_shapes,
        // One store of dx · gelu'. Both sides run gelu_from_output.hpp's fp32 inversion, but with
        // other expf, logf and cbrtf (within 2 ulp) and the device's fused multiply-adds: near the
        // minimum their gelu(x̂) differ by a few roundings of |y| ≈ 0.17, δ ≤ 4·2^-24·0.17, which
        // the inverse's conditioning turns into up to √(2·√(2/π)·δ) ≈ 2.6e-4 on gelu'
        // (test_cpu_backward.cpp derives the bound), against max|dx·gelu'| ≈ 1: 3e-4 on the store
        // tolerance. A wrong branch or element moves an output by tenths.
        .tolerance = [](DType dtype) { return store_tolerance(dtype) + 3e-4; },
        .cost = [](const OpShape& s, DType dtype) {
            return with_bits(memory_cost(3.0 * static_cast<double>(s.dims[0]), dtype), s.dims[0]);  // y, dx read, dx written
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<GeluBackwardFromOutputCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
