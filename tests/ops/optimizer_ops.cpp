// The optimizer's entries: AdamW over one tensor (launch_adamw) without and with fp32 master
// weights, against cpu::adamw, and the global gradient norm (launch_squared_norm_partials over
// several tensors, then launch_sum_partials) against cpu::squared_norm.
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/optimizer.cuh"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

// Chosen so that every term of the update moves the weights (|w| in [0.5, 1]) by far more than
// bf16's tolerance of 0.8 % of the largest: the decay by lr·wd = 2.5 %, the step by up to lr·
// |m̂| / (√v̂ + eps) ≈ 5 % and more. At step 3 the bias corrections divide m by 0.27 and v by
// 0.14, so leaving one out changes the step by tens of percent; eps is 10 % to 40 % of √v̂ (v in
// [1e-4, 1e-2]), so an eps in the wrong place shows; grad_scale halves g. The moments are fp32 in
// every dtype and a formula error moves them by O(1).
constexpr cpu::AdamW kAdamW{
    .lr = 0.05f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 0.01f, .weight_decay = 0.5f, .step = 3, .grad_scale = 0.5f};

template <class T>
class AdamwCase final : public OpCase {
public:
    AdamwCase(const OpShape& shape, bool with_master, cudaStream_t stream)
        : n_(as_size(shape.dims[0])),
          // fp32 master weights are not representable in T. Without a master the weights are the
          // params themselves; with one, the params start unrelated to it (in a step they are its
          // rounding), so that a kernel updating them instead of the master fails by O(1).
          weights_(random_values(n_, with_master ? DType::fp32 : dtype, kSeed, 0.5f, 1.0f, Sign::either)),
          grads_(random_values(n_, dtype, kSeed + 1, 0.01f, 0.5f, Sign::either)),
          m_(random_values(n_, DType::fp32, kSeed + 2, 1e-3f, 0.1f, Sign::either)),
          v_(random_values(n_, DType::fp32, kSeed + 3, 1e-4f, 1e-2f, Sign::positive)),
          d_params_(with_master ? random_values(n_, dtype, kSeed + 4, 0.5f, 1.0f, Sign::either) : weights_, stream),
          d_grads_(grads_, stream),
          d_m_(m_, stream),
          d_v_(v_, stream) {
        if (with_master) d_master_ = std::make_unique<DeviceArray<float>>(weights_, stream);
    }

    void run(cudaStream_t stream) override {
        gpu::launch_adamw<T>(d_params_.get(), d_master_ ? d_master_->get() : nullptr, d_grads_.get(), d_m_.get(),
                             d_v_.get(), static_cast<std::int64_t>(n_), kAdamW, stream);
    }

    OpError check(cudaStream_t stream) override {
        std::vector<float> weights = weights_, m = m_, v = v_;
        cpu::adamw(weights.data(), grads_.data(), m.data(), v.data(), static_cast<std::int64_t>(n_), kAdamW);
        OpError error = compare("params", d_params_.to_host(stream), rounded(weights));
        if (d_master_) error.include(compare("master", d_master_->to_host(stream), weights));
        error.include(compare("m", d_m_.to_host(stream), m));
        error.include(compare("v", d_v_.to_host(stream), v));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    static std::vector<float> rounded(std::vector<float> values) {
        round_through_dtype(values, dtype);
        return values;
    }

    std::size_t n_;
    std::vector<float> weights_, grads_, m_, v_;
    DeviceArray<T> d_params_, d_grads_;
    DeviceArray<float> d_m_, d_v_;
    std::unique_ptr<DeviceArray<float>> d_master_;
};

// Each dimension is one tensor of the gradient, laid end to end in one buffer as a training step
// keeps them, so every tensor after the first starts at an odd offset.
template <class T>
class GradNormCase final : public OpCase {
public:
    GradNormCase(const OpShape& shape, cudaStream_t stream)
        : sizes_(shape.dims),
          // Magnitudes within a factor of 2: the smallest square is over a third of the mean, so
          // losing one element of the largest test tensor moves the sum by more than the tolerance.
          grads_(random_values(as_size(std::accumulate(sizes_.begin(), sizes_.end(), std::int64_t{0})), dtype, kSeed,
                               0.5f, 1.0f, Sign::either)),
          d_grads_(grads_, stream),
          d_partials_(allocate_device(static_cast<std::int64_t>(partials() * sizeof(double)))),
          d_squared_norm_(allocate_device(sizeof(double))) {}

    void run(cudaStream_t stream) override {
        std::int64_t offset = 0;
        for (std::size_t t = 0; t < sizes_.size(); ++t) {
            gpu::launch_squared_norm_partials<T>(d_grads_.get() + offset, sizes_[t], partials_at(t * gpu::kNormPartials),
                                                 stream);
            offset += sizes_[t];
        }
        gpu::launch_sum_partials(partials_at(0), static_cast<std::int64_t>(partials()), squared_norm_at(), stream);
    }

    OpError check(cudaStream_t stream) override {
        double want = 0.0;
        std::int64_t offset = 0;
        for (const std::int64_t n : sizes_) {
            want += cpu::squared_norm(grads_.data() + offset, n);
            offset += n;
        }
        const double got = squared_norm(stream);
        OpError error;
        error.rel_err = std::abs(got - want) / want;
        error.nonfinite = std::isfinite(got) ? 0 : 1;
        std::ostringstream text;
        text.precision(std::numeric_limits<double>::max_digits10);
        text << "squared norm: gpu " << got << ", cpu " << want;
        error.worst = text.str();
        // No atomics: a second run sums in the same order, to the same bits.
        run(stream);
        const double again = squared_norm(stream);
        if (again != got) {
            OpError repeat;
            repeat.rel_err = std::numeric_limits<double>::infinity();
            text.str("");
            text << "squared norm: a second run gave " << again << " after " << got;
            repeat.worst = text.str();
            error.include(repeat);
        }
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();

    std::size_t partials() const { return sizes_.size() * gpu::kNormPartials; }
    double* partials_at(std::size_t i) const { return reinterpret_cast<double*>(d_partials_.get()) + i; }
    double* squared_norm_at() const { return reinterpret_cast<double*>(d_squared_norm_.get()); }

    double squared_norm(cudaStream_t stream) const {
        double value = std::numeric_limits<double>::quiet_NaN();
        CUDA_CHECK(cudaMemcpyAsync(&value, squared_norm_at(), sizeof value, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return value;
    }

    std::vector<std::int64_t> sizes_;
    std::vector<float> grads_;
    DeviceArray<T> d_grads_;
    DeviceMemory d_partials_, d_squared_norm_;
};

OpShape elements(std::int64_t n) { return op_shape({{"n", n}}); }

// One element; 75 (a partial block); past the grid cap, so threads stride.
const std::vector<OpShape> kAdamwTestShapes = {elements(1), elements(75), elements(kPastGridCap)};
// 64M elements: a slice of GPT-2 1.5B's 1.56e9 that fits a quick benchmark; the rate is what counts.
const std::vector<OpShape> kAdamwBenchShapes = {elements(std::int64_t{64} << 20)};

// Weights (read and written) in T, the gradient read in T, m and v read and written in fp32, and
// with a master the fp32 weights read and written too.
OpCost adamw_cost(const OpShape& s, DType dtype, bool with_master) {
    const auto per_element = 3.0 * static_cast<double>(dtype_size(dtype)) + 16.0 + (with_master ? 8.0 : 0.0);
    return OpCost{0, per_element * static_cast<double>(s.dims[0])};
}

}  // namespace

std::vector<OpEntry> optimizer_ops() {
    std::vector<OpEntry> entries;
    // Both sides compute the update in fp32 from the same inputs, differing only where the compiler
    // fuses a multiply and an add (a few ulp, under store_tolerance's fp32 part); the params are
    // then rounded once to T, which straddling a rounding boundary makes one ulp of T at most:
    // store_tolerance. m, v and the master are fp32 and meet its fp32 part.
    entries.push_back(OpEntry{
        .name = "adamw",
        .family = "optimizer",
        .test_shapes = kAdamwTestShapes,
        .bench_shapes = kAdamwBenchShapes,
        .tolerance = store_tolerance,
        .cost = [](const OpShape& s, DType dtype) { return adamw_cost(s, dtype, false); },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<AdamwCase>(dtype, s, false, stream);
        },
    });
    entries.push_back(OpEntry{
        .name = "adamw_master",
        .family = "optimizer",
        .test_shapes = kAdamwTestShapes,
        .bench_shapes = kAdamwBenchShapes,
        // fp32 params are their own master.
        .dtypes = {DType::fp16, DType::bf16},
        .tolerance = store_tolerance,
        .cost = [](const OpShape& s, DType dtype) { return adamw_cost(s, dtype, true); },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<AdamwCase>(dtype, s, true, stream);
        },
    });
    const auto tensors = [](std::int64_t a, std::int64_t b, std::int64_t c) {
        return op_shape({{"n1", a}, {"n2", b}, {"n3", c}});
    };
    entries.push_back(OpEntry{
        .name = "grad_norm",
        .family = "optimizer",
        // One element, 75, and one past the partials' cap (kNormPartials blocks), end to end.
        .test_shapes = {tensors(1, 75, kPastGridCap)},
        // GPT-2 1.5B's wte, one of its MLP weights and a bias.
        .bench_shapes = {tensors(50257 * 1600, 6400 * 1600, 1600)},
        // Both sides square exactly (a float squared fits a double) and sum in double, in other
        // orders: at most n·2⁻⁵³ ≈ 2e-9 apart each over these 1.7e7 terms. 1e-8 still fails a
        // lost or doubled element of the largest tensor (≥ 2.6e-8 with these magnitudes).
        .tolerance = [](DType) { return 1e-8; },
        // The gradient read once; the partials are a few kilobytes.
        .cost = [](const OpShape& s, DType dtype) {
            return OpCost{0, static_cast<double>(std::accumulate(s.dims.begin(), s.dims.end(), std::int64_t{0})) *
                                 static_cast<double>(dtype_size(dtype))};
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<GradNormCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
