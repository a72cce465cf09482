#pragma once
// The fused classifier of the training step (llm.c's): softmax, cross-entropy loss and the
// gradient of the logits in one kernel, the gradient written over the logits so the [rows, vocab]
// probabilities are never stored. cpu::cross_entropy (cpu_ops.hpp) computes the same numbers.
//
// T is the logits' type: float, __half or __nv_bfloat16 (explicit instantiations in
// classifier.cu); the softmax, the loss and the gradient are computed in fp32, the gradient
// rounded to T once when it is stored. Plain C++ can include this header.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sweetspot::gpu {

// For each of `rows` rows of logits [rows, vocab], row r at logits + r · row_stride (≥ vocab; the
// training step pads its rows so the lm_head's GEMMs get aligned leading dimensions; rows may be
// one chunk of the batch): losses[r] = logsumexp(row) − row[targets[r]] in fp32, and
// the row overwritten by its gradient (softmax(row) − onehot(targets[r])) · scale in T. scale is
// 1 / the batch's targets for a mean loss (times the loss scale when fp16 gradients are scaled).
// targets are in [0, vocab), which the caller checks: the kernel reads them from device memory;
// or kIgnoredTarget, a row without a target (a padding row of a ragged batch): its loss and its
// gradient are zero.
inline constexpr std::int32_t kIgnoredTarget = -1;
template <class T>
void launch_fused_classifier(T* logits, float* losses, const std::int32_t* targets, std::int64_t rows, int vocab,
                             std::int64_t row_stride, float scale, cudaStream_t stream);

// *loss = scale · Σ losses[0 .. rows), summed in double in an order that depends on rows only,
// so one loss of the whole batch (scale 1 / its targets) comes back as a single float.
void launch_mean_loss(const float* losses, std::int64_t rows, float scale, float* loss, cudaStream_t stream);

}  // namespace sweetspot::gpu
