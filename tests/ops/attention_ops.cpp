// Attention's backward entries: the materialised one (gpu::attention_backward: cuBLAS products
// around launch_causal_softmax_backward, both softmax forms of the forward) and the flash one
// (gpu::flash_attention_backward, from the forward's output and logsumexp), each against
// cpu::grouped_attention_backward (cpu::attention_backward where every q head has its own kv head)
// with the same dropout masks, over multi-head and grouped heads.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/gemm.hpp"
#include "kernels/compute/gpu_attention.hpp"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

constexpr std::uint32_t kSite = 6;
constexpr int kPositions = 1024;  // the model's max_positions, the dropout mask's stride

// dims: batch, seq, c, heads, p% (the attention dropout's probability, in percent) and, for
// the grouped entries, kv heads (qkv_heads.hpp); the multi-head entries' shapes name none.
struct AttentionShape {
    int batch, seq, c, n_head, n_kv_head;
    float p;
    explicit AttentionShape(const OpShape& s)
        : batch(static_cast<int>(s.dims[0])),
          seq(static_cast<int>(s.dims[1])),
          c(static_cast<int>(s.dims[2])),
          n_head(static_cast<int>(s.dims[3])),
          n_kv_head(static_cast<int>(s.dims.size() > 5 ? s.dims[5] : s.dims[3])),
          p(static_cast<float>(s.dims[4]) / 100.0f) {}
    std::size_t rows() const { return as_size(batch) * as_size(seq); }
    std::size_t scores() const { return as_size(batch) * as_size(n_head) * as_size(seq) * as_size(seq); }
    int hd() const { return c / n_head; }
    QkvHeads heads() const { return QkvHeads{n_head, n_kv_head, hd()}; }
    std::size_t ld() const { return as_size(heads().ld()); }
    Dropout dropout() const { return Dropout{p, 3}.for_shape(seq, kPositions); }
};

OpShape attention_shape(int batch, int seq, int c, int n_head, int p_percent) {
    return op_shape({{"batch", batch}, {"seq", seq}, {"c", c}, {"heads", n_head}, {"p%", p_percent}});
}
OpShape grouped_attention_shape(int batch, int seq, int head_dim, int n_head, int n_kv_head, int p_percent) {
    return op_shape({{"batch", batch}, {"seq", seq}, {"c", head_dim * n_head}, {"heads", n_head}, {"p%", p_percent},
                     {"kv_heads", n_kv_head}});
}

// The attention's upstream gradient dout [rows, c].
std::vector<float> upstream(const AttentionShape& s, DType dtype) {
    return random_values(s.rows() * as_size(s.c), dtype, kSeed + 2, 0.01f, 1.0f, Sign::either);
}

std::vector<float> reference_dqkv(const AttentionShape& s, const std::vector<float>& dout, const std::vector<float>& qkv) {
    std::vector<float> dqkv(s.rows() * s.ld());
    std::vector<float> probs(as_size(s.seq) * as_size(s.seq)), grad(probs.size());
    cpu::grouped_attention_backward(dqkv.data(), probs.data(), grad.data(), dout.data(), qkv.data(), s.batch, s.seq,
                                    s.n_head, s.n_kv_head, s.hd(), s.dropout(), kSite);
    return dqkv;
}

// dq, dk and dv, each on its own. At seq 1 the reference's dq and dk are exact zeros (the softmax
// of a single score has no gradient), which judge nothing: those are measured against dv's
// magnitude instead.
OpError compare_dqkv(const std::vector<float>& got, const std::vector<float>& want, const AttentionShape& s) {
    const QkvHeads heads = s.heads();
    const std::size_t ld = s.ld();
    std::vector<float> part_got, part_want;
    // Columns [first, first + width) of every row.
    const auto take = [&](std::int64_t first, std::int64_t width) {
        const auto w = as_size(width);
        part_got.resize(s.rows() * w);
        part_want.resize(s.rows() * w);
        for (std::size_t r = 0; r < s.rows(); ++r) {
            const auto from = static_cast<std::ptrdiff_t>(r * ld + as_size(first));
            std::copy_n(got.begin() + from, w, part_got.begin() + static_cast<std::ptrdiff_t>(r * w));
            std::copy_n(want.begin() + from, w, part_want.begin() + static_cast<std::ptrdiff_t>(r * w));
        }
    };
    const std::int64_t kv_width = std::int64_t{heads.n_kv_head} * heads.head_dim;
    take(heads.v_col(0), kv_width);
    OpError error = compare("dv", part_got, part_want);
    double dv_max = 0.0;
    for (const float v : part_want) dv_max = std::max(dv_max, static_cast<double>(std::abs(v)));
    for (const int part : {0, 1}) {
        if (part == 0) take(heads.q_col(0), heads.c());
        else take(heads.k_col(0), kv_width);
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
          qkv_(attention_inputs(s_.rows(), s_.heads(), dtype)),
          dout_(upstream(s_, dtype)),
          d_qkv_(qkv_, stream),
          d_dout_(dout_, stream),
          d_dqkv_(s_.rows() * s_.ld(), stream),
          d_scores_(s_.scores(), stream),
          d_grad_(s_.scores(), stream),
          gemm_(dtype, stream, Fp32Gemm::exact) {}

    void run(cudaStream_t) override { backward(d_dqkv_, false); }

    OpError check(cudaStream_t stream) override {
        const auto got = d_dqkv_.to_host(stream);
        OpError error = compare_dqkv(got, reference_dqkv(s_, dout_, qkv_), s_);
        const DeviceArray<T> fused(s_.rows() * s_.ld(), stream);
        backward(fused, true);
        error.include(require_equal("the softmax fusion's form against baseline's", fused.to_host(stream), got));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();

    void backward(const DeviceArray<T>& dqkv, bool fused) {
        const gpu::AttentionOptions options{fused, s_.dropout(), kSite};
        gpu::attention_backward<T>(gemm_, dqkv.get(), d_scores_.get(), d_grad_.get(), d_dout_.get(), d_qkv_.get(),
                                   s_.batch, s_.seq, s_.heads(), options);
    }

    AttentionShape s_;
    std::vector<float> qkv_, dout_;
    DeviceArray<T> d_qkv_, d_dout_, d_dqkv_, d_scores_, d_grad_;
    Gemm gemm_;
};

// The row logsumexp the forward leaves for the backward, in double: ln Σ_j exp(q·k_j / sqrt(hd))
// over the keys j ≤ t of each (batch, q head, t), k_j of the q head's kv head.
std::vector<float> reference_lse(const AttentionShape& s, const std::vector<float>& qkv) {
    const int hd = s.hd();
    const QkvHeads heads = s.heads();
    const std::size_t ld = s.ld();
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    std::vector<float> lse(as_size(s.batch) * as_size(s.n_head) * as_size(s.seq));
    std::vector<double> scores(as_size(s.seq));
    for (int b = 0; b < s.batch; ++b) {
        for (int h = 0; h < s.n_head; ++h) {
            for (int t = 0; t < s.seq; ++t) {
                const float* q = qkv.data() + (as_size(b) * as_size(s.seq) + as_size(t)) * ld + as_size(heads.q_col(h));
                double max = -INFINITY;
                for (int j = 0; j <= t; ++j) {
                    const float* k = qkv.data() + (as_size(b) * as_size(s.seq) + as_size(j)) * ld + as_size(heads.k_col(h));
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
          qkv_(attention_inputs(s_.rows(), s_.heads(), dtype)),
          dout_(upstream(s_, dtype)),
          d_qkv_(qkv_, stream),
          d_dout_(dout_, stream),
          d_out_(s_.rows() * as_size(s_.c), stream),
          d_dqkv_(s_.rows() * s_.ld(), stream),
          d_lse_(as_size(s_.batch) * as_size(s_.n_head) * as_size(s_.seq), stream),
          d_scratch_(as_size(gpu::flash_attention_backward_scratch_floats(s_.batch, s_.seq, s_.heads())), stream) {
        gpu::flash_attention<T>(d_out_.get(), d_qkv_.get(), s_.batch, s_.seq, s_.heads(), s_.dropout(), kSite, stream,
                                d_lse_.get());
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }

    void run(cudaStream_t stream) override {
        gpu::flash_attention_backward<T>(d_dqkv_.get(), d_scratch_.get(), d_dout_.get(), d_qkv_.get(), d_out_.get(),
                                         d_lse_.get(), s_.batch, s_.seq, s_.heads(), s_.dropout(), kSite, stream);
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
// causal half; heads are q heads), as FlashAttention's papers and PyTorch's benchmarks count a
// backward. Bytes: qkv, dout, out read and dqkv written once, in the dtype.
OpCost backward_cost(const OpShape& shape, DType dtype) {
    const AttentionShape s(shape);
    const double forward = 4.0 * s.batch * s.n_head * static_cast<double>(s.seq) * s.seq * s.hd() / 2.0;
    const double elements = static_cast<double>(s.rows()) * (2.0 * static_cast<double>(s.ld()) + 2.0 * s.c);
    return OpCost{2.5 * forward, elements * static_cast<double>(dtype_size(dtype))};
}

// The backward rounds to T where the CPU keeps fp32, as the forward does (attention_tolerance):
// the recomputed probabilities and the scores' gradient dS before the products that read them,
// then dq, dk and dv once each. Each gradient is a sum of such terms with random signs, as the
// forward's output is, so the forward's 4u (fp16, bf16) and 1e-5 (fp32) hold with the same margin,
// and a wrong mask, dropout factor, scale or head offset is far above them.
double backward_tolerance(DType dtype) { return attention_tolerance(dtype); }

// The largest group of q heads sharing a kv head in grouped_tests.
constexpr int kLargestGroup = 6;

// Over grouped heads a kv head's dk and dv add their group's q heads' terms, each rounded to T
// before the sum (the flash kernels' shares; the materialised products' running sums, beta 1):
// up to one more rounding of u/2 of a term's size per q head of the group on top of multi-head
// attention's, 3u at a group of 6 in fp16 and bf16 (fp32's are far below its 1e-5). A missing,
// doubled or misplaced term is a whole term's size off.
double grouped_backward_tolerance(DType dtype) {
    return dtype == DType::fp32 ? backward_tolerance(dtype)
                                : backward_tolerance(dtype) + 0.5 * kLargestGroup * unit_roundoff(dtype);
}

// Grouped heads for both backwards: 6 q heads sharing 1 (multi-query), 2 or 3 kv heads, 8 sharing
// 8, 4 or 2 (groups of 1, 2 and 4); head dims 16 and 48 (CUDA cores in the flash backward), 64,
// 80 and 128 (its tensor cores; 80 is LLaMA's odd one); seq 1, 33 and 200; dropout 0 and 0.1 on
// one shape. `materialised`: the [seq, seq] scratches stay small, so not seq 200 at head dim 128.
std::vector<OpShape> grouped_tests(bool materialised) {
    std::vector<OpShape> shapes;
    for (const auto& [n_head, n_kv] : {std::pair{6, 1}, std::pair{6, 2}, std::pair{6, 3}, std::pair{8, 8},
                                       std::pair{8, 4}, std::pair{8, 2}}) {
        for (const int hd : {16, 48, 64, 80, 128}) {
            for (const int seq : {1, 33, 200}) {
                if (materialised && seq == 200 && hd != 80) continue;
                shapes.push_back(grouped_attention_shape(2, seq, hd, n_head, n_kv, 0));
            }
        }
    }
    shapes.push_back(grouped_attention_shape(2, 33, 64, 6, 2, 10));
    return shapes;
}

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
    // Both backwards over grouped kv heads (grouped_tests), their own entries since their shapes
    // name the kv heads. Bench: LLaMA 3.2 1B's layer (32 q heads of 64 sharing 8 kv heads) at
    // seq 1024, at batch 4 materialised (as above) and 16 flash.
    entries.push_back(OpEntry{
        .name = "grouped_attention_backward",
        .family = "attention",
        .test_shapes = grouped_tests(true),
        .bench_shapes = {grouped_attention_shape(4, 1024, 64, 32, 8, 0)},
        .tolerance = grouped_backward_tolerance,
        .cost = backward_cost,
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<AttentionBackwardCase>(dtype, s, stream);
        },
    });
    entries.push_back(OpEntry{
        .name = "grouped_flash_attention_backward",
        .family = "attention",
        .test_shapes = grouped_tests(false),
        .bench_shapes = {grouped_attention_shape(16, 1024, 64, 32, 8, 0)},
        .dtypes = {DType::fp16, DType::bf16, DType::fp32},
        .tolerance = grouped_backward_tolerance,
        .cost = backward_cost,
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<FlashAttentionBackwardCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
