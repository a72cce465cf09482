// The attention's softmax: the baseline's causal mask then softmax (launch_causal_mask,
// launch_softmax), and the `softmax` fusion of mask, softmax and attention dropout
// (launch_causal_softmax_dropout).
#include <limits>
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/dropout.cuh"
#include "kernels/compute/softmax.cuh"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

// dims: blocks ((batch, head) pairs, each seq rows), seq, offset (added to every score), then for
// the fusion p% (its dropout's probability, in percent).
struct SoftmaxShape {
    std::int64_t blocks;
    int seq;
    float offset;
    float p;
    explicit SoftmaxShape(const OpShape& s)
        : blocks(s.dims[0]),
          seq(static_cast<int>(s.dims[1])),
          offset(static_cast<float>(s.dims[2])),
          p(s.dims.size() > 3 ? static_cast<float>(s.dims[3]) / 100.0f : 0.0f) {}
    std::int64_t rows() const { return blocks * seq; }
    std::size_t n() const { return as_size(rows()) * as_size(seq); }
};

std::vector<float> scores(const SoftmaxShape& s, DType dtype) {
    auto v = random_values(s.n(), dtype, kSeed, 0.01f, 4.0f, Sign::either);
    for (float& x : v) x += s.offset;
    round_through_dtype(v, dtype);
    return v;
}

// The masked columns must be exact zeros: P·V runs over the full row.
OpError masked_zeros(const std::vector<float>& p, const SoftmaxShape& s) {
    std::size_t nonzero = 0;
    for (std::int64_t r = 0; r < s.rows(); ++r) {
        for (int j = static_cast<int>(r % s.seq) + 1; j < s.seq; ++j) nonzero += p[as_size(r * s.seq + j)] != 0.0f;
    }
    return OpError{nonzero == 0 ? 0.0 : std::numeric_limits<double>::infinity(), 0,
                   "masked columns: " + std::to_string(nonzero) + " not exactly zero"};
}

template <class T>
class MaskSoftmaxCase final : public OpCase {
public:
    MaskSoftmaxCase(const OpShape& shape, cudaStream_t stream)
        : s_(shape), scores_(scores(s_, dtype)), d_scores_(scores_, stream) {}

    void run(cudaStream_t stream) override {
        gpu::launch_causal_mask<T>(d_scores_.get(), s_.rows(), s_.seq, stream);
        gpu::launch_softmax<T>(d_scores_.get(), s_.rows(), s_.seq, stream);
    }

    OpError check(cudaStream_t stream) override {
        const auto got = d_scores_.to_host(stream);
        std::vector<float> want = scores_;
        cpu::causal_softmax(want.data(), s_.rows(), s_.seq);
        OpError error = compare("p", got, want);
        error.include(masked_zeros(got, s_));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    SoftmaxShape s_;
    std::vector<float> scores_;
    DeviceArray<T> d_scores_;
};

template <class T>
class CausalSoftmaxDropoutCase final : public OpCase {
public:
    CausalSoftmaxDropoutCase(const OpShape& shape, cudaStream_t stream)
        : s_(shape),
          d_(Dropout{s_.p, 42}.for_shape(s_.seq, 512)),
          scores_(scores(s_, dtype)),
          d_scores_(scores_, stream) {}

    void run(cudaStream_t stream) override {
        gpu::launch_causal_softmax_dropout<T>(d_scores_.get(), s_.rows(), s_.seq, d_, 7, stream);
    }

    OpError check(cudaStream_t stream) override {
        const auto fused = d_scores_.to_host(stream);
        const DeviceArray<T> parts(scores_, stream);
        gpu::launch_causal_mask<T>(parts.get(), s_.rows(), s_.seq, stream);
        gpu::launch_softmax<T>(parts.get(), s_.rows(), s_.seq, stream);
        gpu::launch_dropout_probabilities<T>(parts.get(), s_.rows(), d_, 7, stream);

        std::vector<float> want = scores_;
        cpu::causal_softmax(want.data(), s_.rows(), s_.seq);
        cpu::dropout_probabilities(want.data(), 0, s_.rows(), d_, 7);
        OpError error = compare("p", fused, want);
        error.include(masked_zeros(fused, s_));
        // One kernel, the same numbers as the three it replaces: the masked columns add exp(−inf)
        // = 0 to the sums, and the probability is rounded to T before its dropout factor.
        error.include(require_equal("fused against mask, softmax and dropout", fused, parts.to_host(stream)));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    SoftmaxShape s_;
    Dropout d_;
    std::vector<float> scores_;
    DeviceArray<T> d_scores_;
};

OpShape softmax_shape(std::int64_t blocks, int seq, int offset) {
    return op_shape({{"blocks", blocks}, {"seq", seq}, {"offset", offset}});
}
OpShape fused_shape(std::int64_t blocks, int seq, int offset, int p_percent) {
    return op_shape({{"blocks", blocks}, {"seq", seq}, {"offset", offset}, {"p%", p_percent}});
}

// Read and written once by each kernel (the rates of a softmax over rows of a few kB).
OpCost passes_cost(const OpShape& s, DType dtype, int passes) {
    return memory_cost(2.0 * passes * static_cast<double>(SoftmaxShape(s).n()), dtype);
}

}  // namespace

std::vector<OpEntry> softmax_ops() {
    std::vector<OpEntry> entries;
    // seq 1 (a single column, always 1); 13; 300, longer than the kernel's 256 threads; scores
    // near 94, whose exp overflows fp32, so only a kernel that subtracts the row max passes.
    // Bench: the scores [B·H·T, T] of GPT-2 small (12 heads) and 1.5B (25) at batch 1, seq 1024.
    entries.push_back(OpEntry{
        .name = "mask_softmax",
        .family = "softmax",
        .test_shapes = {softmax_shape(6, 1, 0), softmax_shape(6, 13, 0), softmax_shape(2, 300, 0),
                        softmax_shape(4, 37, 90)},
        .bench_shapes = {softmax_shape(12, 1024, 0), softmax_shape(25, 1024, 0)},
        .tolerance = store_tolerance,
        .cost = [](const OpShape& s, DType dtype) { return passes_cost(s, dtype, 2); },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<MaskSoftmaxCase>(dtype, s, stream);
        },
    });
    entries.push_back(OpEntry{
        .name = "causal_softmax_dropout",
        .family = "softmax",
        // The shapes above without dropout, then dropout 0.25 over seq 1, 25 and 300.
        .test_shapes = {fused_shape(6, 1, 0, 0), fused_shape(6, 13, 0, 0), fused_shape(2, 300, 0, 0),
                        fused_shape(4, 37, 90, 0), fused_shape(3, 1, 0, 25), fused_shape(3, 25, 0, 25),
                        fused_shape(3, 300, 0, 25)},
        .bench_shapes = {fused_shape(12, 1024, 0, 0), fused_shape(25, 1024, 0, 0), fused_shape(25, 1024, 0, 10)},
        // The dropout's 1 / (1 − p) multiplies a probability already rounded to T and is rounded
        // again: two stores, twice the store tolerance.
        .tolerance = [](DType dtype) { return 2.0 * store_tolerance(dtype); },
        .cost = [](const OpShape& s, DType dtype) { return passes_cost(s, dtype, 1); },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<CausalSoftmaxDropoutCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
