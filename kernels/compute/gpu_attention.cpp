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

// scores = dropout(causal_softmax(scale·Q·Kᵀ)) for every (batch, head), as the options say;
// returns the launches.
template <class T>
int probabilities(Gemm& gemm, T* scores, const T* qkv, int batch, int seq, int c, int n_head, bool fused,
                  const Dropout& dropout, std::uint32_t site) {
    const int hd = c / n_head;
    const std::int64_t ld_qkv = 3 * static_cast<std::int64_t>(c);
    const std::int64_t score_stride = static_cast<std::int64_t>(seq) * seq;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (int b = 0; b < batch; ++b) {
        const T* q = qkv + static_cast<std::int64_t>(b) * seq * ld_qkv;
        const T* k = q + c;
        T* s = scores + static_cast<std::int64_t>(b) * n_head * score_stride;
        gemm.batched(/*trans_b=*/true, seq, seq, hd, scale, q, static_cast<int>(ld_qkv), hd, k,
                     static_cast<int>(ld_qkv), hd, 0.0f, s, seq, score_stride, n_head);
    }
    const std::int64_t rows = static_cast<std::int64_t>(batch) * n_head * seq;
    if (fused) {
        launch_causal_softmax_dropout<T>(scores, rows, seq, dropout, site, gemm.stream());
        return batch + 1;
    }
    launch_causal_mask<T>(scores, rows, seq, gemm.stream());
    launch_softmax<T>(scores, rows, seq, gemm.stream());
    launch_dropout_probabilities<T>(scores, rows, dropout, site, gemm.stream());
    return batch + (dropout.active() ? 3 : 2);
}

}  // namespace

template <class T>
int attention(Gemm& gemm, T* out, T* scores, const T* qkv, int batch, int seq, int c, int n_head,
              const AttentionOptions& options) {
    check_dtype<T>(gemm, "gpu::attention");
    const int hd = c / n_head;
    const std::int64_t ld_qkv = 3 * static_cast<std::int64_t>(c);
    const std::int64_t score_stride = static_cast<std::int64_t>(seq) * seq;
    const int launches = probabilities(gemm, scores, qkv, batch, seq, c, n_head, options.fused_softmax, options.dropout,
                                 options.dropout_site);
    for (int b = 0; b < batch; ++b) {
        const T* v = qkv + static_cast<std::int64_t>(b) * seq * ld_qkv + 2 * c;
        const T* p = scores + static_cast<std::int64_t>(b) * n_head * score_stride;
        T* o = out + static_cast<std::int64_t>(b) * seq * c;
        gemm.batched(/*trans_b=*/false, seq, hd, seq, 1.0f, p, seq, score_stride, v, static_cast<int>(ld_qkv), hd,
                     0.0f, o, c, hd, n_head);
    }
    return launches + batch;
}

template <class T>
int attention_backward(Gemm& gemm, T* dqkv, T* scores, T* grad, const T* dout, const T* qkv, int batch, int seq, int c,
                       int n_head, const AttentionOptions& options) {
    check_dtype<T>(gemm, "gpu::attention_backward");
    const int hd = c / n_head;
    const int ld_qkv = 3 * c;
    const std::int64_t score_stride = static_cast<std::int64_t>(seq) * seq;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    const int launches = probabilities(gemm, scores, qkv, batch, seq, c, n_head, options.fused_softmax, Dropout{}, 0);
    const auto batch_offset = [&](int b, std::int64_t row_elems) { return static_cast<std::int64_t>(b) * seq * row_elems; };
    for (int b = 0; b < batch; ++b) {
        const T* v = qkv + batch_offset(b, ld_qkv) + 2 * c;
        gemm.batched(/*trans_b=*/true, seq, seq, hd, 1.0f, dout + batch_offset(b, c), c, hd, v, ld_qkv, hd, 0.0f,
                     grad + b * n_head * score_stride, seq, score_stride, n_head);
    }
    launch_causal_softmax_backward<T>(scores, grad, static_cast<std::int64_t>(batch) * n_head * seq, seq,
                                      options.dropout, options.dropout_site, gemm.stream());
    for (int b = 0; b < batch; ++b) {
        const T* q = qkv + batch_offset(b, ld_qkv);
        const T* k = q + c;
        T* dq = dqkv + batch_offset(b, ld_qkv);
        T* dk = dq + c;
        T* dv = dq + 2 * c;
        const T* a = scores + b * n_head * score_stride;
        const T* ds = grad + b * n_head * score_stride;
        gemm.batched(/*trans_a=*/true, /*trans_b=*/false, seq, hd, seq, 1.0f, a, seq, score_stride,
                     dout + batch_offset(b, c), c, hd, 0.0f, dv, ld_qkv, hd, n_head);
        gemm.batched(/*trans_a=*/false, /*trans_b=*/false, seq, hd, seq, scale, ds, seq, score_stride, k, ld_qkv, hd,
                     0.0f, dq, ld_qkv, hd, n_head);
        gemm.batched(/*trans_a=*/true, /*trans_b=*/false, seq, hd, seq, scale, ds, seq, score_stride, q, ld_qkv, hd,
                     0.0f, dk, ld_qkv, hd, n_head);
    }
    return launches + 1 + 4 * batch;
}

template int attention<float>(Gemm&, float*, float*, const float*, int, int, int, int, const AttentionOptions&);
template int attention<__half>(Gemm&, __half*, __half*, const __half*, int, int, int, int, const AttentionOptions&);
template int attention<__nv_bfloat16>(Gemm&, __nv_bfloat16*, __nv_bfloat16*, const __nv_bfloat16*, int, int, int, int,
                                      const AttentionOptions&);

template int attention_backward<float>(Gemm&, float*, float*, float*, const float*, const float*, int, int, int, int,
                                       const AttentionOptions&);
template int attention_backward<__half>(Gemm&, __half*, __half*, __half*, const __half*, const __half*, int, int, int,
                                        int, const AttentionOptions&);
template int attention_backward<__nv_bfloat16>(Gemm&, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*,
                                               const __nv_bfloat16*, const __nv_bfloat16*, int, int, int, int,
                                               const AttentionOptions&);

}  // namespace sweetspot::gpu
