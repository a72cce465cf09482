// The residual stream's add: the forward (launch_residual_add), which is also its backward's
// only kernel (residual.cuh says why).
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/residual.cuh"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

// dims: n.
template <class T>
class ResidualAddCase final : public OpCase {
public:
    ResidualAddCase(const OpShape& shape, cudaStream_t stream)
        : n_(shape.dims[0]),
          x_(random_values(as_size(n_), dtype, kSeed, 0.01f, 4.0f, Sign::either)),
          y_(random_values(as_size(n_), dtype, kSeed + 1, 0.01f, 1.0f, Sign::either)),
          d_x_(x_, stream),
          d_y_(y_, stream) {}

    void run(cudaStream_t stream) override { gpu::launch_residual_add<T>(d_x_.get(), d_y_.get(), n_, stream); }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want = x_;
        cpu::residual_add(want.data(), y_.data(), n_);
        return compare("x", d_x_.to_host(stream), want);
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::int64_t n_;
    std::vector<float> x_, y_;
    DeviceArray<T> d_x_, d_y_;
};

}  // namespace

std::vector<OpEntry> residual_ops() {
    std::vector<OpEntry> entries;
    entries.push_back(OpEntry{
        .name = "residual_add",
        .family = "residual",
        .test_shapes = {n_shape(1), n_shape(13 * 75), n_shape(kPastGridCap)},
        // The residual stream [B·T, c], GPT-2 small and 1.5B at batch 8, seq 1024.
        .bench_shapes = {n_shape(8 * 1024 * 768), n_shape(8 * 1024 * 1600)},
        .tolerance = store_tolerance,
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(3.0 * static_cast<double>(s.dims[0]), dtype);  // x, y read, x written
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<ResidualAddCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
