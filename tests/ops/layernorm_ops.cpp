// LayerNorm's entries: the forward (launch_layernorm).
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

template <class T>
class LayernormCase final : public OpCase {
public:
    LayernormCase(const OpShape& shape, cudaStream_t stream)
        : rows_(static_cast<int>(shape.dims[0])),
          c_(static_cast<int>(shape.dims[1])),
          // Positive inputs: the mean is far from zero, so a kernel that does not subtract it fails.
          in_(random_values(n(), dtype, kSeed, 0.5f, 3.0f, Sign::positive)),
          w_(random_values(as_size(c_), dtype, kSeed + 1, 0.5f, 1.5f, Sign::positive)),
          b_(random_values(as_size(c_), dtype, kSeed + 2, 0.01f, 0.5f, Sign::either)),
          d_in_(in_, stream),
          d_w_(w_, stream),
          d_b_(b_, stream),
          d_out_(n(), stream) {}

    void run(cudaStream_t stream) override {
        gpu::launch_layernorm<T>(d_out_.get(), d_in_.get(), d_w_.get(), d_b_.get(), rows_, c_, kEps, stream);
    }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want(n());
        cpu::layernorm(want.data(), in_.data(), w_.data(), b_.data(), rows_, c_, kEps);
        return compare("out", d_out_.to_host(stream), want);
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::size_t n() const { return as_size(rows_) * as_size(c_); }

    int rows_, c_;
    std::vector<float> in_, w_, b_;
    DeviceArray<T> d_in_, d_w_, d_b_, d_out_;
};

OpShape rows_c(std::int64_t rows, std::int64_t c) { return op_shape({{"rows", rows}, {"c", c}}); }

// GPT-2 small and 1.5B at batch 8, seq 1024.
const std::vector<OpShape> kModelRows = {rows_c(8 * 1024, 768), rows_c(8 * 1024, 1600)};

}  // namespace

std::vector<OpEntry> layernorm_ops() {
    std::vector<OpEntry> entries;
    entries.push_back(OpEntry{
        .name = "layernorm",
        .family = "layernorm",
        // One row; more rows than the 8 warps of one block; c 75 (a partial last warp-stride),
        // GPT-2 small's 768 and 1.5B's 1600.
        .test_shapes = {rows_c(1, 75), rows_c(13, 75), rows_c(5, 768), rows_c(3, 1600)},
        .bench_shapes = kModelRows,
        .tolerance = store_tolerance,
        // Reads in, writes out; w and b are read once per block from cache.
        .cost = [](const OpShape& s, DType dtype) {
            return OpCost{0, 2.0 * static_cast<double>(s.dims[0] * s.dims[1]) * static_cast<double>(dtype_size(dtype))};
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<LayernormCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
