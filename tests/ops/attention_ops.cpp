// Attention's backward entries: the materialised one (gpu::attention_backward: cuBLAS products
// around launch_causal_softmax_backward, both softmax forms of the forward) and the flash one
// (gpu::flash_attention_backward, from the forward's output and logsumexp), each against
// cpu::attention_backward with the same dropout masks.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/gemm.hpp"
#include "kernels/compute/gpu_attention.hpp"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

constexpr std::uint32_t kSite = 6;
constexpr int kPositions = 1024;  // the model's max_positions, the dropout mask's stride

// dims: batch, seq, c, heads, p% (the attention dropout's probability, in percent).
struct AttentionShape {
    int batch, seq, c, n_head;
    float p;
    explicit AttentionShape(const OpShape& s)
        : batch(static_cast<int>(s.dims[0])),
          seq(static_cast<int>(s.dims[1])),
          c(static_cast<int>(s.dims[2])),
          n_head(static_cast<int>(s.dims[3])),
          p(static_cast<float>(s.dims[4]) / 100.0f) {}
    std::size_t rows() const { return as_size(batch) * as_size(seq); }
    std::size_t scores() const { return as_size(batch) * as_size(n_head) * as_size(seq) * as_size(seq); }
    int hd() const { return c / n_head; }
    Dropout dropout() const { return Dropout{p, 3}.for_shape(seq, kPositions); }
};

OpShape attention_shape(int batch, int seq, int c, int n_head, int p_percent) {
    return op_shape({{"batch", batch}, {"seq", seq}, {"c", c}, {"heads", n_head}, {"p%", p_percent}});
}

// The attention's upstream gradient dout [rows, c].
std::vector<float> upstream(const AttentionShape& s, DType dtype) {
    return random_values(s.rows() * as_size(s.c), dtype, kSeed + 2, 0.01f, 1.0f, Sign::either);
}

std::vector<float> reference_dqkv(const AttentionShape& s, const std::vector<float>& dout, const std::vector<float>& qkv) {
    std::vector<float> dqkv(s.rows() * 3 * as_size(s.c));
    std::vector<float> probs(as_size(s.seq) * as_size(s.seq)), grad(probs.size());
    cpu::attention_backward(dqkv.data(), probs.data(), grad.data(), dout.data(), qkv.data(), s.batch, s.seq, s.c,
                            s.n_head, s.dropout(), kSite);
    return dqkv;
}

// dq, dk and dv, each on its own. At seq 1 the reference's dq and dk are exact zeros (the softmax
// of a single score has no gradient), which judge nothing: those are measured against dv's
// magnitude instead.
OpError compare_dqkv(const std::vector<float>& got, const std::vector<float>& want, const AttentionShape& s) {
    const std::size_t c = as_size(s.c);
    std::vector<float> part_got(s.rows() * c), part_want(s.rows() * c);
    const auto take = [&](int part) {
        for (std::size_t r = 0; r < s.rows(); ++r) {
            std::copy_n(got.begin() + static_cast<std::ptrdiff_t>(r * 3 * c + part * c), c,
                        part_got.begin() + static_cast<std::ptrdiff_t>(r * c));
            std::copy_n(want.begin() + static_cast<std::ptrdiff_t>(r * 3 * c + part * c), c,
                        part_want.begin() + static_cast<std::ptrdiff_t>(r * c));
        }
    };
    take(2);
    OpError error = compare("dv", part_got, part_want);
    double dv_max = 0.0;
    for (const float v : part_want) dv_max = std::max(dv_max, static_cast<double>(std::abs(v)));
    for (const int part : {0, 1}) {
        take(part);
        const char* name = part == 0 ? "dq" : "dk";
        const bool zero = std::all_of(part_want.begin(), part_want.end(), [](float v) { return v == 0.0f; });
        if (!zero) {
            error.include(compare(name, part_got, part_want));
            continue;
        }
        OpError against_dv = compare(name, part_got, part_want);
        double max_err = 0.0;
        for (const float v : part_got) max_err = std::max(max_err, static_cast<double>(std::abs(v)));
        against_dv.rel_err = max_err / dv_max;
        against_dv.worst += " (all zero: measured against max |dv|)";
        error.include(against_dv);
    }
    return error;
}

// The materialised backward in baseline's form (mask, softmax as separate kernels for the
// recomputed probabilities); check() also runs the `softmax` fusion's form, which must give the
// same bits.
template <class T>
class AttentionBackwardCase final : public OpCase {
public:
    AttentionBackwardCase(const OpShape& shape, cudaStream_t stream)
        : s_(shape),
          qkv_(attention_inputs(s_.rows(), as_size(s_.c), dtype)),
          dout_(upstream(s_, dtype)),
          d_qkv_(qkv_, stream),
          d_dout_(dout_, stream),
          d_dqkv_(s_.rows() * 3 * as_size(s_.c), stream),
          d_scores_(s_.scores(), stream),
          d_grad_(s_.scores(), stream),
          gemm_(dtype, stream, Fp32Gemm::exact) {}

    void run(cudaStream_t) override { backward(d_dqkv_, false); }

    OpError check(cudaStream_t stream) override {
        const auto got = d_dqkv_.to_host(stream);
        OpError error = compare_dqkv(got, reference_dqkv(s_, dout_, qkv_), s_);
        const DeviceArray<T> fused(s_.rows() * 3 * as_size(s_.c), stream);
        backward(fused, true);
        error.include(require_equal("the softmax fusion's form against baseline's", fused.to_host(stream), got));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();

    void backward(const DeviceArray<T>& dqkv, bool fused) {
        const gpu::AttentionOptions options{fused, s_.dropout(), kSite};
        gpu::attention_backward<T>(gemm_, dqkv.get(), d_scores_.get(), d_grad_.get(), d_dout_.get(), d_qkv_.get(),
                                   s_.batch, s_.seq, s_.c, s_.n_head, options);
    }

    AttentionShape s_;
    std::vector<float> qkv_, dout_;
    DeviceArray<T> d_qkv_, d_dout_, d_dqkv_, d_scores_, d_grad_;
    Gemm gemm_;
};

// The row logsumexp the forward leaves for the backward, in double: ln Σ_j exp(q·k_j / sqrt(hd))
// over the keys j ≤ t of each (batch, head, t).
std::vector<float> reference_lse(const AttentionShape& s, const std::vector<float>& qkv) {
    const int hd = s.hd();
    const std::size_t ld = 3 * as_size(s.c);
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    std::vector<float> lse(as_size(s.batch) * as_size(s.n_head) * as_size(s.seq));
    std::vector<double> scores(as_size(s.seq));
    for (int b = 0; b < s.batch; ++b) {
        for (int h = 0; h < s.n_head; ++h) {
            const std::size_t head = as_size(h) * as_size(hd);
            for (int t = 0; t < s.seq; ++t) {
                const float* q = qkv.data() + (as_size(b) * as_size(s.seq) + as_size(t)) * ld + head;
                double max = -INFINITY;
                for (int j = 0; j <= t; ++j) {
                    const float* k = qkv.data() + (as_size(b) * as_size(s.seq) + as_size(j)) * ld + as_size(s.c) + head;
                    double dot = 0.0;
                    for (int d = 0; d < hd; ++d) dot += static_cast<double>(q[d]) * k[d];
                    scores[as_size(j)] = dot * scale;
                    max = std::max(max, scores[as_size(j)]);
                }
                double sum = 0.0;
                for (int j = 0; j <= t; ++j) sum += std::exp(scores[as_size(j)] - max);
                lse[(as_size(b) * as_size(s.n_head) + as_size(h)) * as_size(s.seq) + as_size(t)] =
                    static_cast<float>(max + std::log(sum));
            }
        }
    }
    return lse;
}

// The flash backward from what the flash forward (run once, with its logsumexp) left; check()
// also judges that logsumexp.
template <class T>
class FlashAttentionBackwardCase final : public OpCase {
public:
    FlashAttentionBackwardCase(const OpShape& shape, cudaStream_t stream)
        : s_(shape),
          qkv_(attention_inputs(s_.rows(), as_size(s_.c), dtype)),
          dout_(upstream(s_, dtype)),
          d_qkv_(qkv_, stream),
          d_dout_(dout_, stream),
          d_out_(s_.rows() * as_size(s_.c), stream),
          d_dqkv_(s_.rows() * 3 * as_size(s_.c), stream),
          d_lse_(as_size(s_.batch) * as_size(s_.n_head) * as_size(s_.seq), stream),
          d_scratch_(as_size(gpu::flash_attention_backward_scratch_floats(s_.batch, s_.seq, s_.c, s_.n_head)), stream) {
        gpu::flash_attention<T>(d_out_.get(), d_qkv_.get(), s_.batch, s_.seq, s_.c, s_.n_head, s_.dropout(), kSite,
                                stream, d_lse_.get());
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }

    void run(cudaStream_t stream) override {
        gpu::flash_attention_backward<T>(d_dqkv_.get(), d_scratch_.get(), d_dout_.get(), d_qkv_.get(), d_out_.get(),
                                         d_lse_.get(), s_.batch, s_.seq, s_.c, s_.n_head, s_.dropout(), kSite, stream);
    }

    OpError check(cudaStream_t stream) override {
        OpError error = compare_dqkv(d_dqkv_.to_host(stream), reference_dqkv(s_, dout_, qkv_), s_);
        error.include(compare("lse", d_lse_.to_host(stream), reference_lse(s_, qkv_)));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    AttentionShape s_;
    std::vector<float> qkv_, dout_;
    DeviceArray<T> d_qkv_, d_dout_, d_out_, d_dqkv_;
    DeviceArray<float> d_lse_, d_scratch_;
};

// Both backwards count the model's flops, not the work they do: 2.5 × the causal forward's
// 4·batch·heads·seq²·hd / 2 (five products of the forward's size against its two, over the
// causal half), as FlashAttention's papers and PyTorch's benchmarks count a backward. Bytes: qkv,
// dout, out read and dqkv written once, in the dtype.
OpCost backward_cost(const OpShape& shape, DType dtype) {
    const AttentionShape s(shape);
    const double forward = 4.0 * s.batch * s.n_head * static_cast<double>(s.seq) * s.seq * s.hd() / 2.0;
    const double elements = static_cast<double>(s.rows()) * s.c * (3 + 1 + 1 + 3);
    return OpCost{2.5 * forward, elements * static_cast<double>(dtype_size(dtype))};
}

// The backward rounds to T where the CPU keeps fp32, as the forward does (attention_tolerance):
// the recomputed probabilities and the scores' gradient dS before the products that read them,
// then dq, dk and dv once each. Each gradient is a sum of such terms with random signs, as the
// forward's output is, so the forward's 4u (fp16, bf16) and 1e-5 (fp32) hold with the same margin,
// and a wrong mask, dropout factor, scale or head offset is far above them.
double backward_tolerance(DType dtype) { return attention_tolerance(dtype); }

}  // namespace

std::vector<OpEntry> attention_ops() {
    std::vector<OpEntry> entries;
    // Head dims 5, 25 (c 75: odd leading dimensions) and 80; seq 1 (one key: dq and dk are zero),
    // 33; dropout 0 and 0.1. Bench: GPT-2 1.5B's layer (25 heads of 64) at batch 4, seq 1024
    // (the [seq, seq] scratches of 16k tokens would take gigabytes).
    std::vector<OpShape> materialised_tests;
    for (const int p : {0, 10}) {
        for (const OpShape& shape : {attention_shape(1, 1, 75, 3, p), attention_shape(2, 33, 15, 3, p),
                                     attention_shape(2, 33, 75, 3, p), attention_shape(1, 33, 160, 2, p)})
            materialised_tests.push_back(shape);
    }
    entries.push_back(OpEntry{
        .name = "attention_backward",
        .family = "attention",
        .test_shapes = materialised_tests,
        .bench_shapes = {attention_shape(4, 1024, 1600, 25, 0)},
        .tolerance = backward_tolerance,
        .cost = backward_cost,
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<AttentionBackwardCase>(dtype, s, stream);
        },
    });
    // Head dim 25 (CUDA cores in every dtype), 64 and 128 (GPT-2's and GPT-3's), 32, 80 and 96
    // (the tensor-core kernels' other head dims), 320 (the forward's quad kernel; the backward's
    // smaller key tile);
    // seq 1, 33, 100 and 777 (partial key and query tiles, many of them); dropout 0 and 0.1.
    // Bench: 16k tokens as PyTorch's and FlashAttention's benchmarks take them: GPT-2 1.5B's
    // layer (25 heads of 64) and 2048 channels in heads of 64 and 128, at seq 1024 and 2048.
    std::vector<OpShape> flash_tests;
    for (const int p : {0, 10}) {
        for (const OpShape& shape : {attention_shape(1, 1, 75, 3, p), attention_shape(2, 33, 75, 3, p),
                                     attention_shape(1, 777, 160, 2, p), attention_shape(2, 33, 128, 2, p),
                                     attention_shape(1, 777, 128, 2, p), attention_shape(2, 100, 256, 2, p),
                                     attention_shape(1, 777, 256, 2, p), attention_shape(1, 100, 192, 6, p),
                                     attention_shape(1, 100, 192, 2, p), attention_shape(1, 33, 320, 1, p)})
            flash_tests.push_back(shape);
    }
    entries.push_back(OpEntry{
        .name = "flash_attention_backward",
        .family = "attention",
        .test_shapes = flash_tests,
        .bench_shapes = {attention_shape(16, 1024, 1600, 25, 0), attention_shape(16, 1024, 2048, 32, 0),
                         attention_shape(8, 2048, 2048, 32, 0), attention_shape(16, 1024, 2048, 16, 0),
                         attention_shape(8, 2048, 2048, 16, 0)},
        // fp32 last: it takes the benchmark's longest.
        .dtypes = {DType::fp16, DType::bf16, DType::fp32},
        .tolerance = backward_tolerance,
        .cost = backward_cost,
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<FlashAttentionBackwardCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
