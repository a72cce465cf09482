// A linear layer's bias: the forward (launch_add_bias) and its backward (launch_bias_backward).
#include <vector>

#include "kernels/compute/bias.cuh"
#include "kernels/compute/cpu_ops.hpp"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

// dims: rows, cols.
template <class T>
class AddBiasCase final : public OpCase {
public:
    AddBiasCase(const OpShape& shape, cudaStream_t stream)
        : rows_(shape.dims[0]),
          cols_(shape.dims[1]),
          y_(random_values(as_size(rows_ * cols_), dtype, kSeed, 0.01f, 2.0f, Sign::either)),
          bias_(random_values(as_size(cols_), dtype, kSeed + 1, 0.01f, 1.0f, Sign::either)),
          d_y_(y_, stream),
          d_bias_(bias_, stream) {}

    void run(cudaStream_t stream) override { gpu::launch_add_bias<T>(d_y_.get(), d_bias_.get(), rows_, cols_, stream); }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want = y_;
        cpu::add_bias(want.data(), bias_.data(), rows_, cols_);
        return compare("y", d_y_.to_host(stream), want);
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::int64_t rows_, cols_;
    std::vector<float> y_, bias_;
    DeviceArray<T> d_y_, d_bias_;
};

// dims: rows, cols. dbias starts non-zero: the op adds to it.
template <class T>
class BiasBackwardCase final : public OpCase {
public:
    BiasBackwardCase(const OpShape& shape, cudaStream_t stream)
        : rows_(shape.dims[0]),
          cols_(static_cast<int>(shape.dims[1])),
          dout_(random_values(as_size(rows_) * as_size(cols_), dtype, kSeed, 0.01f, 1.0f, Sign::either)),
          dbias_(random_values(as_size(cols_), dtype, kSeed + 1, 0.01f, 1.0f, Sign::either)),
          d_dout_(dout_, stream),
          d_dbias_(dbias_, stream),
          scratch_(allocate_device(gpu::bias_backward_scratch_floats(rows_, cols_) *
                                   static_cast<std::int64_t>(sizeof(float)))) {}

    void run(cudaStream_t stream) override {
        gpu::launch_bias_backward<T>(d_dbias_.get(), d_dout_.get(), rows_, cols_,
                                     reinterpret_cast<float*>(scratch_.get()), stream);
    }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want = dbias_;
        cpu::bias_backward(want.data(), dout_.data(), rows_, cols_);
        return compare("dbias", d_dbias_.to_host(stream), want);
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::int64_t rows_;
    int cols_;
    std::vector<float> dout_, dbias_;
    DeviceArray<T> d_dout_, d_dbias_;
    DeviceMemory scratch_;
};

OpShape rows_cols(std::int64_t rows, std::int64_t cols) { return op_shape({{"rows", rows}, {"cols", cols}}); }

}  // namespace

std::vector<OpEntry> bias_ops() {
    std::vector<OpEntry> entries;
    entries.push_back(OpEntry{
        .name = "add_bias",
        .family = "bias",
        // One row; qkv's 3c = 225; past the grid cap (each thread then adds to several rows).
        .test_shapes = {rows_cols(1, 75), rows_cols(6, 225), rows_cols(kPastGridCap / 75, 75)},
        // The qkv projection's bias, GPT-2 small and 1.5B at batch 8, seq 1024.
        .bench_shapes = {rows_cols(8 * 1024, 3 * 768), rows_cols(8 * 1024, 3 * 1600)},
        .tolerance = store_tolerance,
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(2.0 * static_cast<double>(s.dims[0] * s.dims[1]), dtype);  // y read and written
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<AddBiasCase>(dtype, s, stream);
        },
    });
    entries.push_back(OpEntry{
        .name = "bias_backward",
        .family = "bias",
        // One row; qkv's 225 columns; 1000 and 4099 rows, one and several chunks of 256 rows with
        // a partial last one; 20000 rows (79 chunks) of 33 columns, not a multiple of the warp.
        .test_shapes = {rows_cols(1, 75), rows_cols(6, 225), rows_cols(1000, 77), rows_cols(4099, 75),
                        rows_cols(20000, 33)},
        // The attention projection's, the qkv's and the MLP's biases of GPT-2 small and 1.5B at
        // batch 8, seq 1024.
        .bench_shapes = {rows_cols(8 * 1024, 768), rows_cols(8 * 1024, 3 * 768), rows_cols(8 * 1024, 1600),
                         rows_cols(8 * 1024, 4 * 1600)},
        // dbias + Σ dout is stored once, to T. The sums are fp32 on both sides but in other orders
        // (the CPU row by row, the GPU by chunks of 256 rows): over ≤ 20000 terms of random sign
        // their difference stays ≲ 3e-6 of the largest sum, within the fp32 part.
        .tolerance = store_tolerance,
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(static_cast<double>(s.dims[0] * s.dims[1]), dtype);  // dout read once
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<BiasBackwardCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
