// The count of NaN and infinite values (launch_count_nonfinite), the cell's output check.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/compute/count_nonfinite.cuh"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

// dims: n. The input has NaN and infinities planted at both ends and, past the grid cap, where
// the grid-stride loop comes round; the CPU side counts them by construction.
template <class T>
class CountNonfiniteCase final : public OpCase {
public:
    CountNonfiniteCase(const OpShape& shape, cudaStream_t stream)
        : n_(shape.dims[0]), x_(planted(n_)), d_x_(x_, stream), count_(allocate_device(sizeof(unsigned long long))) {
        // A count the launch does not reset first comes back far from the planted one.
        CUDA_CHECK(cudaMemsetAsync(count_.get(), 0x5A, sizeof(unsigned long long), stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }

    void run(cudaStream_t stream) override {
        gpu::launch_count_nonfinite<T>(d_x_.get(), n_, reinterpret_cast<unsigned long long*>(count_.get()), stream);
    }

    OpError check(cudaStream_t stream) override {
        unsigned long long got = 0;
        CUDA_CHECK(cudaMemcpyAsync(&got, count_.get(), sizeof got, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return compare("count", {static_cast<float>(got)}, {static_cast<float>(planted_)});
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();

    std::vector<float> planted(std::int64_t n) {
        auto x = random_values(as_size(n), dtype, kSeed, 0.01f, 4.0f, Sign::either);
        x.front() = std::numeric_limits<float>::quiet_NaN();
        x.back() = -std::numeric_limits<float>::infinity();
        planted_ = n == 1 ? 1 : 2;
        if (n >= kPastGridCap) {
            for (const std::int64_t i : {n / 2, n - 7}) x[as_size(i)] = std::numeric_limits<float>::infinity();
            planted_ += 2;
        }
        return x;
    }

    std::int64_t n_;
    std::uint64_t planted_ = 0;
    std::vector<float> x_;
    DeviceArray<T> d_x_;
    DeviceMemory count_;
};

}  // namespace

std::vector<OpEntry> count_nonfinite_ops() {
    std::vector<OpEntry> entries;
    entries.push_back(OpEntry{
        .name = "count_nonfinite",
        .family = "count_nonfinite",
        .test_shapes = {n_shape(1), n_shape(13 * 75), n_shape(kPastGridCap)},
        // GPT-2's logits [T, vocab] at batch 1, seq 1024.
        .bench_shapes = {n_shape(std::int64_t{1024} * 50257)},
        // A count: exact, or wrong.
        .tolerance = [](DType) { return 0.0; },
        .cost = [](const OpShape& s, DType dtype) { return memory_cost(static_cast<double>(s.dims[0]), dtype); },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<CountNonfiniteCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
