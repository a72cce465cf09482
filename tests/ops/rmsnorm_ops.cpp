// RMSNorm's entries: the forward (launch_rmsnorm) and the backward (launch_rmsnorm_backward).
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/rmsnorm.cuh"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

// dims: rows, c.
template <class T>
class RmsnormCase final : public OpCase {
public:
    RmsnormCase(const OpShape& shape, cudaStream_t stream)
        : rows_(static_cast<int>(shape.dims[0])),
          c_(static_cast<int>(shape.dims[1])),
          in_(random_values(n(), dtype, kSeed, 0.01f, 3.0f, Sign::either)),
          w_(random_values(as_size(c_), dtype, kSeed + 1, 0.5f, 1.5f, Sign::either)),
          d_in_(in_, stream),
          d_w_(w_, stream),
          d_out_(n(), stream) {}

    void run(cudaStream_t stream) override {
        gpu::launch_rmsnorm<T>(d_out_.get(), d_in_.get(), d_w_.get(), rows_, c_, kEps, stream);
    }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want(n());
        cpu::rmsnorm(want.data(), in_.data(), w_.data(), rows_, c_, kEps);
        return compare("out", d_out_.to_host(stream), want);
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::size_t n() const { return as_size(rows_) * as_size(c_); }

    int rows_, c_;
    std::vector<float> in_, w_;
    DeviceArray<T> d_in_, d_w_, d_out_;
};

// dims: rows, c. dx and dw start non-zero: the op adds to them.
template <class T>
class RmsnormBackwardCase final : public OpCase {
public:
    RmsnormBackwardCase(const OpShape& shape, cudaStream_t stream)
        : rows_(static_cast<int>(shape.dims[0])),
          c_(static_cast<int>(shape.dims[1])),
          in_(random_values(n(), dtype, kSeed, 0.01f, 3.0f, Sign::either)),
          w_(random_values(as_size(c_), dtype, kSeed + 1, 0.5f, 1.5f, Sign::either)),
          dout_(random_values(n(), dtype, kSeed + 2, 0.01f, 1.0f, Sign::either)),
          dx_(random_values(n(), dtype, kSeed + 3, 0.01f, 1.0f, Sign::either)),
          dw_(random_values(as_size(c_), dtype, kSeed + 4, 0.01f, 1.0f, Sign::either)),
          d_in_(in_, stream),
          d_w_(w_, stream),
          d_dout_(dout_, stream),
          d_dx_(dx_, stream),
          d_dw_(dw_, stream),
          scratch_(allocate_device(gpu::rmsnorm_backward_scratch_floats(rows_, c_) *
                                   static_cast<std::int64_t>(sizeof(float)))) {}

    void run(cudaStream_t stream) override { run_into(d_dx_, d_dw_, stream); }

    OpError check(cudaStream_t stream) override {
        std::vector<float> dx = dx_, dw = dw_;
        cpu::rmsnorm_backward(dx.data(), dw.data(), dout_.data(), in_.data(), w_.data(), rows_, c_, kEps);
        const auto got_dx = d_dx_.to_host(stream), got_dw = d_dw_.to_host(stream);
        OpError error = compare("dx", got_dx, dx);
        error.include(compare("dw", got_dw, dw));
        // Again from the same start: the same bits (dw's partials are summed in block order).
        const DeviceArray<T> again_dx(dx_, stream), again_dw(dw_, stream);
        run_into(again_dx, again_dw, stream);
        error.include(require_equal("dx run twice", again_dx.to_host(stream), got_dx));
        error.include(require_equal("dw run twice", again_dw.to_host(stream), got_dw));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::size_t n() const { return as_size(rows_) * as_size(c_); }

    void run_into(const DeviceArray<T>& dx, const DeviceArray<T>& dw, cudaStream_t stream) {
        gpu::launch_rmsnorm_backward<T>(dx.get(), dw.get(), d_dout_.get(), d_in_.get(), d_w_.get(), rows_, c_, kEps,
                                        reinterpret_cast<float*>(scratch_.get()), stream);
    }

    int rows_, c_;
    std::vector<float> in_, w_, dout_, dx_, dw_;
    DeviceArray<T> d_in_, d_w_, d_dout_, d_dx_, d_dw_;
    DeviceMemory scratch_;
};

OpShape rows_c(std::int64_t rows, std::int64_t c) { return op_shape({{"rows", rows}, {"c", c}}); }

// One row and 13 (more than the forward's 8 warps a block); c 75, 777 and 33 (no whole 16-byte
// packs: single elements), 100 (whole packs in fp32, not in fp16 or bf16), LLaMA 1B's 2048 and
// 7B's 4096 (packs); 1100 rows, more than the backward's 512 blocks (several rows a block);
// c 13000, whose backward sums (c floats) need more than the default 48 KiB of shared memory.
const std::vector<OpShape> kTestShapes = {rows_c(1, 75),    rows_c(13, 75),  rows_c(5, 2048),  rows_c(3, 4096),
                                          rows_c(7, 777),   rows_c(5, 33),   rows_c(40, 100),  rows_c(1100, 100),
                                          rows_c(2, 13000)};

// LLaMA 3.2 1B (c 2048) and Llama 2 7B (c 4096) at 8192 rows (batch 4 × seq 2048).
const std::vector<OpShape> kBenchShapes = {rows_c(8192, 2048), rows_c(8192, 4096)};

}  // namespace

std::vector<OpEntry> rmsnorm_ops() {
    std::vector<OpEntry> entries;
    entries.push_back(OpEntry{
        .name = "rmsnorm",
        .family = "rmsnorm",
        .test_shapes = kTestShapes,
        .bench_shapes = kBenchShapes,
        // One store of an fp32 value on both sides; Σ x² runs in another order (~1e-7).
        .tolerance = store_tolerance,
        // Reads in, writes out; w is read once per block from cache.
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(2.0 * static_cast<double>(s.dims[0] * s.dims[1]), dtype);
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<RmsnormCase>(dtype, s, stream);
        },
    });
    entries.push_back(OpEntry{
        .name = "rmsnorm_backward",
        .family = "rmsnorm",
        .test_shapes = kTestShapes,
        .bench_shapes = kBenchShapes,
        // layernorm_backward's: dx stored once from its row's sums, dw from sums over the rows (by
        // block, then over the blocks), both in another order than the CPU's, within the store
        // tolerance's fp32 part.
        .tolerance = store_tolerance,
        // Reads in, dout and dx, writes dx; w and dw are a row each.
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(4.0 * static_cast<double>(s.dims[0] * s.dims[1]), dtype);
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<RmsnormBackwardCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
