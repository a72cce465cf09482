// A linear layer's bias: the forward (launch_add_bias).
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
    return entries;
}

}  // namespace sweetspot::ops
