// Attention with no transposes or copies: each head is addressed in place through leading
// dimensions and batch strides.
//
// In row-major terms, for batch b and head h (hd = C / H):
//   Q_h = qkv + b·T·3C + h·hd        [T, hd], row stride 3C
//   K_h = Q_h + C                    [T, hd], row stride 3C
//   V_h = Q_h + 2C                   [T, hd], row stride 3C
//   S_h = scores + (b·H + h)·T·T     [T, T],  row stride T
//   O_h = out + b·T·C + h·hd         [T, hd], row stride C
// so stepping h → h + 1 moves Q, K, V and O by hd elements and S by T·T: ONE strided-batched
// GEMM over the H heads per batch b (b's stride T·3C is not a multiple of hd, hence the host
// loop over b). Gemm::batched takes row-major operands; its column-major translation is derived
// in gemm.cpp. The products:
//   S_h = (1/sqrt(hd)) · Q_h · K_hᵀ   batched(trans_b = true,  m = T, n = T,  k = hd)
//   P_h = dropout(causal_softmax(S_h)) in place, over all B·H·T rows: three launches (mask,
//                                     softmax, dropout when active) or, with the `softmax`
//                                     fusion, one
//   O_h = P_h · V_h                   batched(trans_b = false, m = T, n = hd, k = T)
// The scale 1/sqrt(hd) is folded into the QKᵀ GEMM's alpha (applied in fp32 before the scores
// are rounded to T, which also keeps fp16 scores further from overflow), as cpu::attention does;
// the softmax kernel applies no scale. Masked entries are exact zeros, so P·V over full rows is
// exactly the causal product.
//
// The backward runs the same addressing the other way (A_h = the probabilities after dropout,
// G_h = the [T, T] scratch grad, dO_h, dQ_h, dK_h, dV_h addressed as O_h and Q_h, K_h, V_h):
//   P_h  = causal_softmax(S_h)        recomputed as above, without dropout
//   G_h  = dO_h · V_hᵀ                batched(trans_b = true,  m = T, n = T,  k = hd)
//   G_h  = dS_h, P_h = A_h            one softmax-backward kernel over all B·H·T rows
//   dV_h = A_hᵀ · dO_h                batched(trans_a = true,  m = T, n = hd, k = T)
//   dQ_h = (1/sqrt(hd)) · dS_h · K_h  batched(m = T, n = hd, k = T)
//   dK_h = (1/sqrt(hd)) · dS_hᵀ · Q_h batched(trans_a = true,  m = T, n = hd, k = T)
//
// Grouped heads (qkv_heads.hpp): q head h reads kv head j = h / group, at columns (H + j)·hd of
// a row heads.ld() wide. Stepping the q heads by one no longer steps K and V by a constant, so
// each batch entry's products split into calls whose q heads and kv heads both step by constants
// (for_each_run): the i-th q head of every group (q stride group·hd, kv stride hd; group calls),
// or the q heads of one group (q stride hd, its kv head at stride 0; n_kv_head calls), whichever
// is fewer. Multi-head attention (group 1) is one call over the H heads, the products above. A kv
// head's dK and dV sum its group's q heads: the first form, its calls in order, each adding to
// what the calls before wrote (beta 1), so no call writes an output twice and the sum's order is
// fixed; in fp16 and bf16 each partial sum is rounded to T.
#include "kernels/compute/gpu_attention.hpp"

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/compute/dropout.cuh"
#include "kernels/compute/gpu_dtype.hpp"
#include "kernels/compute/softmax.cuh"

namespace sweetspot::gpu {

namespace {

template <class T>
void check_dtype(const Gemm& gemm, const char* op) {
    if (gemm.dtype() != dtype_of<T>()) {
        throw std::invalid_argument(std::string(op) + ": the Gemm computes in " + std::string(enum_name(gemm.dtype())) +
                                    ", the buffers hold " + std::string(enum_name(dtype_of<T>())) + ".");
    }
}

void check_heads(const QkvHeads& heads, const char* op) {
    if (heads.n_kv_head < 1 || heads.n_head % heads.n_kv_head != 0)
        throw std::invalid_argument(std::string(op) + ": " + std::to_string(heads.n_kv_head) + " kv heads do not divide " +
                                    std::to_string(heads.n_head) + " heads");
}

// One strided-batched call's heads: q heads first_q + n·q_step and kv heads first_q / group +
// n·kv_step for n < count.
struct HeadRun {
    int first_q, q_step, kv_step, count;
};

// Calls run(HeadRun) for calls that together cover every q head once (the header comment says
// which); `summing` for a product whose output is the kv head's. Returns the number of calls.
template <class Run>
int for_each_run(const QkvHeads& heads, bool summing, const Run& run) {
    const int group = heads.n_head / heads.n_kv_head;
    if (summing || group <= heads.n_kv_head) {
        for (int i = 0; i < group; ++i) run(HeadRun{i, group, 1, heads.n_kv_head});
        return group;
    }
    for (int j = 0; j < heads.n_kv_head; ++j) run(HeadRun{j * group, 1, 0, group});
    return heads.n_kv_head;
}

// scores = dropout(causal_softmax(scale·Q·Kᵀ)) for every (batch, q head), as the options say;
// returns the launches.
template <class T>
int probabilities(Gemm& gemm, T* scores, const T* qkv, int batch, int seq, const QkvHeads& heads, bool fused,
                  const Dropout& dropout, std::uint32_t site) {
    const int hd = heads.head_dim, ld_qkv = static_cast<int>(heads.ld());
    const std::int64_t square = static_cast<std::int64_t>(seq) * seq;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    int launches = 0;
    for (int b = 0; b < batch; ++b) {
        const T* qkv_b = qkv + static_cast<std::int64_t>(b) * seq * ld_qkv;
        T* s = scores + static_cast<std::int64_t>(b) * heads.n_head * square;
        launches += for_each_run(heads, false, [&](const HeadRun& r) {
            gemm.batched(/*trans_b=*/true, seq, seq, hd, scale, qkv_b + heads.q_col(r.first_q), ld_qkv,
                         std::int64_t{r.q_step} * hd, qkv_b + heads.k_col(r.first_q), ld_qkv,
                         std::int64_t{r.kv_step} * hd, 0.0f, s + r.first_q * square, seq, r.q_step * square, r.count);
        });
    }
    const std::int64_t rows = static_cast<std::int64_t>(batch) * heads.n_head * seq;
    if (fused) {
        launch_causal_softmax_dropout<T>(scores, rows, seq, dropout, site, gemm.stream());
        return launches + 1;
    }
    launch_causal_mask<T>(scores, rows, seq, gemm.stream());
    launch_softmax<T>(scores, rows, seq, gemm.stream());
    launch_dropout_probabilities<T>(scores, rows, dropout, site, gemm.stream());
    return launches + (dropout.active() ? 3 : 2);
}

}  // namespace

template <class T>
int attention(Gemm& gemm, T* out, T* scores, const T* qkv, int batch, int seq, QkvHeads heads,
              const AttentionOptions& options) {
    check_dtype<T>(gemm, "gpu::attention");
    check_heads(heads, "gpu::attention");
    const int hd = heads.head_dim, c = heads.c(), ld_qkv = static_cast<int>(heads.ld());
    const std::int64_t square = static_cast<std::int64_t>(seq) * seq;
    int launches = probabilities(gemm, scores, qkv, batch, seq, heads, options.fused_softmax, options.dropout,
                                 options.dropout_site);
    for (int b = 0; b < batch; ++b) {
        const T* qkv_b = qkv + static_cast<std::int64_t>(b) * seq * ld_qkv;
        const T* p = scores + static_cast<std::int64_t>(b) * heads.n_head * square;
        T* o = out + static_cast<std::int64_t>(b) * seq * c;
        launches += for_each_run(heads, false, [&](const HeadRun& r) {
            gemm.batched(/*trans_b=*/false, seq, hd, seq, 1.0f, p + r.first_q * square, seq, r.q_step * square,
                         qkv_b + heads.v_col(r.first_q), ld_qkv, std::int64_t{r.kv_step} * hd, 0.0f,
                         o + heads.q_col(r.first_q), c, std::int64_t{r.q_step} * hd, r.count);
        });
    }
    return launches;
}

template <class T>
int attention(Gemm& gemm, T* out, T* scores, const T* qkv, int batch, int seq, int c, int n_head,
              const AttentionOptions& options) {
    return attention<T>(gemm, out, scores, qkv, batch, seq, QkvHeads::multi_head(c, n_head), options);
}

template <class T>
int attention_backward(Gemm& gemm, T* dqkv, T* scores, T* grad, const T* dout, const T* qkv, int batch, int seq,
                       QkvHeads heads, const AttentionOptions& options) {
    check_dtype<T>(gemm, "gpu::attention_backward");
    check_heads(heads, "gpu::attention_backward");
    const int hd = heads.head_dim, c = heads.c(), ld_qkv = static_cast<int>(heads.ld());
    const std::int64_t square = static_cast<std::int64_t>(seq) * seq;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    int launches = probabilities(gemm, scores, qkv, batch, seq, heads, options.fused_softmax, Dropout{}, 0);
    const auto batch_offset = [&](int b, std::int64_t row_elems) { return static_cast<std::int64_t>(b) * seq * row_elems; };
    const auto head_scores = [&](int b) { return static_cast<std::int64_t>(b) * heads.n_head * square; };
    for (int b = 0; b < batch; ++b) {
        const T* qkv_b = qkv + batch_offset(b, ld_qkv);
        const T* dout_b = dout + batch_offset(b, c);
        launches += for_each_run(heads, false, [&](const HeadRun& r) {
            gemm.batched(/*trans_b=*/true, seq, seq, hd, 1.0f, dout_b + heads.q_col(r.first_q), c,
                         std::int64_t{r.q_step} * hd, qkv_b + heads.v_col(r.first_q), ld_qkv, std::int64_t{r.kv_step} * hd,
                         0.0f, grad + head_scores(b) + r.first_q * square, seq, r.q_step * square, r.count);
        });
    }
    launch_causal_softmax_backward<T>(scores, grad, static_cast<std::int64_t>(batch) * heads.n_head * seq, seq,
                                      options.dropout, options.dropout_site, gemm.stream());
    launches += 1;
    for (int b = 0; b < batch; ++b) {
        const T* qkv_b = qkv + batch_offset(b, ld_qkv);
        T* dqkv_b = dqkv + batch_offset(b, ld_qkv);
        const T* dout_b = dout + batch_offset(b, c);
        const T* a = scores + head_scores(b);
        const T* ds = grad + head_scores(b);
        // A run's q heads as operands: their [T, T] matrices and their hd columns of a row.
        const auto q_square = [&](const T* base, const HeadRun& r) { return base + r.first_q * square; };
        const auto q_stride = [&](const HeadRun& r) { return std::int64_t{r.q_step} * hd; };
        const auto kv_stride = [&](const HeadRun& r) { return std::int64_t{r.kv_step} * hd; };
        // The group's first q heads write dV and dK, the others add to them.
        const auto beta = [](const HeadRun& r) { return r.first_q == 0 ? 0.0f : 1.0f; };
        launches += for_each_run(heads, true, [&](const HeadRun& r) {
            gemm.batched(/*trans_a=*/true, /*trans_b=*/false, seq, hd, seq, 1.0f, q_square(a, r), seq, r.q_step * square,
                         dout_b + heads.q_col(r.first_q), c, q_stride(r), beta(r), dqkv_b + heads.v_col(r.first_q),
                         ld_qkv, kv_stride(r), r.count);
        });
        launches += for_each_run(heads, false, [&](const HeadRun& r) {
            gemm.batched(/*trans_a=*/false, /*trans_b=*/false, seq, hd, seq, scale, q_square(ds, r), seq,
                         r.q_step * square, qkv_b + heads.k_col(r.first_q), ld_qkv, kv_stride(r), 0.0f,
                         dqkv_b + heads.q_col(r.first_q), ld_qkv, q_stride(r), r.count);
        });
        launches += for_each_run(heads, true, [&](const HeadRun& r) {
            gemm.batched(/*trans_a=*/true, /*trans_b=*/false, seq, hd, seq, scale, q_square(ds, r), seq,
                         r.q_step * square, qkv_b + heads.q_col(r.first_q), ld_qkv, q_stride(r), beta(r),
                         dqkv_b + heads.k_col(r.first_q), ld_qkv, kv_stride(r), r.count);
        });
    }
    return launches;
}

template <class T>
int attention_backward(Gemm& gemm, T* dqkv, T* scores, T* grad, const T* dout, const T* qkv, int batch, int seq, int c,
                       int n_head, const AttentionOptions& options) {
    return attention_backward<T>(gemm, dqkv, scores, grad, dout, qkv, batch, seq, QkvHeads::multi_head(c, n_head),
                                 options);
}

#define SWEETSPOT_INSTANTIATE(T)                                                                                      \
    template int attention<T>(Gemm&, T*, T*, const T*, int, int, QkvHeads, const AttentionOptions&);                  \
    template int attention<T>(Gemm&, T*, T*, const T*, int, int, int, int, const AttentionOptions&);                  \
    template int attention_backward<T>(Gemm&, T*, T*, T*, const T*, const T*, int, int, QkvHeads,                     \
                                       const AttentionOptions&);                                                      \
    template int attention_backward<T>(Gemm&, T*, T*, T*, const T*, const T*, int, int, int, int, const AttentionOptions&);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
