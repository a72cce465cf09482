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
#include "kernels/compute/gpu_attention.hpp"

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/compute/dropout.cuh"
#include "kernels/compute/gpu_dtype.hpp"
#include "kernels/compute/softmax.cuh"

namespace sweetspot::gpu {

template <class T>
int attention(Gemm& gemm, T* out, T* scores, const T* qkv, int batch, int seq, int c, int n_head,
              const AttentionOptions& options) {
    if (gemm.dtype() != dtype_of<T>()) {
        throw std::invalid_argument("gpu::attention: the Gemm computes in " + std::string(enum_name(gemm.dtype())) +
                                    ", the buffers hold " + std::string(enum_name(dtype_of<T>())) + ".");
    }
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
    int launches = 2 * batch;
    if (options.fused_softmax) {
        launch_causal_softmax_dropout<T>(scores, rows, seq, options.dropout, options.dropout_site, gemm.stream());
        launches += 1;
    } else {
        launch_causal_mask<T>(scores, rows, seq, gemm.stream());
        launch_softmax<T>(scores, rows, seq, gemm.stream());
        launch_dropout_probabilities<T>(scores, rows, options.dropout, options.dropout_site, gemm.stream());
        launches += options.dropout.active() ? 3 : 2;
    }
    for (int b = 0; b < batch; ++b) {
        const T* v = qkv + static_cast<std::int64_t>(b) * seq * ld_qkv + 2 * c;
        const T* p = scores + static_cast<std::int64_t>(b) * n_head * score_stride;
        T* o = out + static_cast<std::int64_t>(b) * seq * c;
        gemm.batched(/*trans_b=*/false, seq, hd, seq, 1.0f, p, seq, score_stride, v, static_cast<int>(ld_qkv), hd,
                     0.0f, o, c, hd, n_head);
    }
    return launches;
}

template int attention<float>(Gemm&, float*, float*, const float*, int, int, int, int, const AttentionOptions&);
template int attention<__half>(Gemm&, __half*, __half*, const __half*, int, int, int, int, const AttentionOptions&);
template int attention<__nv_bfloat16>(Gemm&, __nv_bfloat16*, __nv_bfloat16*, const __nv_bfloat16*, int, int, int, int,
                                      const AttentionOptions&);

}  // namespace sweetspot::gpu
