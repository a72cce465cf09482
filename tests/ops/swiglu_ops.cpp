// The SwiGLU activation's entries: the forward (launch_swiglu) and the backward
// (launch_swiglu_backward).
#include <cstdint>
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/swiglu.cuh"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

// A DeviceArray whose first `offset` elements are padding: the op sees get() + offset, so an odd
// offset leaves no buffer on 16 bytes and the kernels take their single-element path throughout.
template <class T>
class OffsetArray {
public:
    // Holds `values` after the padding.
    OffsetArray(const std::vector<float>& values, std::size_t offset, cudaStream_t stream)
        : offset_(offset), array_(padded(values, offset), stream) {}
    // n elements after the padding, NaN as DeviceArray's.
    OffsetArray(std::size_t n, std::size_t offset, cudaStream_t stream) : offset_(offset), array_(n + offset, stream) {}

    T* get() const { return array_.get() + offset_; }

    std::vector<float> to_host(cudaStream_t stream) const {
        const std::vector<float> all = array_.to_host(stream);
        return {all.begin() + static_cast<std::ptrdiff_t>(offset_), all.end()};
    }

private:
    static std::vector<float> padded(const std::vector<float>& values, std::size_t offset) {
        std::vector<float> all(offset, 1.0f);
        all.insert(all.end(), values.begin(), values.end());
        return all;
    }

    std::size_t offset_;
    DeviceArray<T> array_;
};

// dims: rows, f, offset (elements every buffer starts past a 16-byte boundary).
struct SwigluShape {
    std::size_t n, offset;
    explicit SwigluShape(const OpShape& s)
        : n(as_size(s.dims[0] * s.dims[1])), offset(as_size(s.dims[2])) {}
};

// ±6 reaches both tails of the sigmoid, where silu tends to z and to 0.
std::vector<float> gates(std::size_t n, DType dtype) {
    return random_values(n, dtype, kSeed, 0.01f, 6.0f, Sign::either);
}
std::vector<float> ups(std::size_t n, DType dtype) {
    return random_values(n, dtype, kSeed + 1, 0.01f, 2.0f, Sign::either);
}

template <class T>
class SwigluCase final : public OpCase {
public:
    SwigluCase(const OpShape& shape, cudaStream_t stream)
        : s_(shape),
          gate_(gates(s_.n, dtype)),
          up_(ups(s_.n, dtype)),
          d_gate_(gate_, s_.offset, stream),
          d_up_(up_, s_.offset, stream),
          d_out_(s_.n, s_.offset, stream) {}

    void run(cudaStream_t stream) override {
        gpu::launch_swiglu<T>(d_out_.get(), d_gate_.get(), d_up_.get(), static_cast<std::int64_t>(s_.n), stream);
    }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want(s_.n);
        cpu::swiglu(want.data(), gate_.data(), up_.data(), static_cast<std::int64_t>(s_.n));
        return compare("out", d_out_.to_host(stream), want);
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    SwigluShape s_;
    std::vector<float> gate_, up_;
    OffsetArray<T> d_gate_, d_up_, d_out_;
};

template <class T>
class SwigluBackwardCase final : public OpCase {
public:
    SwigluBackwardCase(const OpShape& shape, cudaStream_t stream)
        : s_(shape),
          gate_(gates(s_.n, dtype)),
          up_(ups(s_.n, dtype)),
          dout_(random_values(s_.n, dtype, kSeed + 2, 0.01f, 1.0f, Sign::either)),
          d_gate_(gate_, s_.offset, stream),
          d_up_(up_, s_.offset, stream),
          d_dout_(dout_, s_.offset, stream),
          d_dgate_(s_.n, s_.offset, stream),
          d_dup_(s_.n, s_.offset, stream) {}

    void run(cudaStream_t stream) override {
        gpu::launch_swiglu_backward<T>(d_dgate_.get(), d_dup_.get(), d_dout_.get(), d_gate_.get(), d_up_.get(),
                                       static_cast<std::int64_t>(s_.n), stream);
    }

    OpError check(cudaStream_t stream) override {
        std::vector<float> dgate(s_.n), dup(s_.n);
        cpu::swiglu_backward(dgate.data(), dup.data(), dout_.data(), gate_.data(), up_.data(),
                             static_cast<std::int64_t>(s_.n));
        OpError error = compare("dgate", d_dgate_.to_host(stream), dgate);
        error.include(compare("dup", d_dup_.to_host(stream), dup));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    SwigluShape s_;
    std::vector<float> gate_, up_, dout_;
    OffsetArray<T> d_gate_, d_up_, d_dout_, d_dgate_, d_dup_;
};

OpShape rows_f(std::int64_t rows, std::int64_t f, std::int64_t offset) {
    return op_shape({{"rows", rows}, {"f", f}, {"offset", offset}});
}

// One element; 7 (no whole pack in fp16 or bf16, one and a tail in fp32); 13 × 77 (a tail after
// the packs); LLaMA 3.2 1B's f 8192 and Llama 2 7B's 11008 (whole packs); the same with buffers
// 1 and 3 elements past 16 bytes (single elements throughout).
const std::vector<OpShape> kTestShapes = {rows_f(1, 1, 0),    rows_f(1, 7, 0),    rows_f(13, 77, 0),
                                          rows_f(5, 8192, 0), rows_f(3, 11008, 0), rows_f(13, 77, 1),
                                          rows_f(5, 8192, 3)};

// The MLP's [rows, f] at 8192 rows (batch 4 × seq 2048): LLaMA 3.2 1B and Llama 2 7B.
const std::vector<OpShape> kBenchShapes = {rows_f(8192, 8192, 0), rows_f(8192, 11008, 0)};

}  // namespace

std::vector<OpEntry> swiglu_ops() {
    std::vector<OpEntry> entries;
    entries.push_back(OpEntry{
        .name = "swiglu",
        .family = "swiglu",
        .test_shapes = kTestShapes,
        .bench_shapes = kBenchShapes,
        // One store of z · σ(z) · u; the device's expf is within 2 ulp of glibc's, ~1e-7 of the result.
        .tolerance = store_tolerance,
        // Reads gate and up, writes out.
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(3.0 * static_cast<double>(s.dims[0] * s.dims[1]), dtype);
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<SwigluCase>(dtype, s, stream);
        },
    });
    entries.push_back(OpEntry{
        .name = "swiglu_backward",
        .family = "swiglu",
        .test_shapes = kTestShapes,
        .bench_shapes = kBenchShapes,
        // One store of each gradient. silu' = σ·(1 + z·(1 − σ)) loses σ's 2 ulp to the cancellation
        // of 1 − σ in the upper tail, which z ≤ 6 scales to ≲ 1e-6 absolute against max|silu'| ≈ 1.1:
        // within the store tolerance's fp32 part.
        .tolerance = store_tolerance,
        // Reads dout, gate and up, writes dgate and dup.
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(5.0 * static_cast<double>(s.dims[0] * s.dims[1]), dtype);
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<SwigluBackwardCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
