#pragma once
// The token and position embedding: the forward's first op.
//
// T is the activation and weight type: float, __half or __nv_bfloat16 (explicit instantiations
// in the .cu). Inside every kernel the math is fp32; only loads and stores are in T. Buffers are
// row-major and contiguous; counts are int64 where B·T·vocab sized buffers could overflow an
// index. Each launcher enqueues one kernel on `stream` and checks the launch. Plain C++ can
// include this header: it only declares host functions.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace sweetspot::gpu {

// x[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]. x [batch·seq, c]; tokens [batch·seq] (ids
// checked on the host); wte [vocab, c]; wpe [max_positions, c], or null for a model without a
// position table (rotary positions): x = wte[tokens].
template <class T>
void launch_embedding(T* x, const std::int32_t* tokens, const T* wte, const T* wpe, int batch, int seq, int c,
                      cudaStream_t stream);
// The same over the rows of any BatchShape (batch_shape.hpp): x[r, :] = wte[tokens[r], :] +
// wpe[positions[r], :] for each of `rows` rows; positions [rows] in device memory
// (BatchShape::positions, each below max_positions).
template <class T>
void launch_embedding(T* x, const std::int32_t* tokens, const T* wte, const T* wpe, const std::int32_t* positions,
                      std::int64_t rows, int c, cudaStream_t stream);

// Bytes of scratch launch_embedding_backward needs for batch·seq rows, or for `rows`.
std::size_t embedding_backward_scratch_bytes(int batch, int seq);
std::size_t embedding_backward_scratch_bytes(std::int64_t rows);

// The backward of launch_embedding (as cpu::embedding_backward): dwte[tokens[r], :] += dx[r, :]
// and dwpe[r % seq, :] += dx[r, :] for every row r of dx [batch·seq, c]. Deterministic, with no
// atomics: the rows are sorted by token (a stable radix sort, so rows of one token stay in row
// order) and each token's rows are summed in fp32 by one block, in that order; each position's
// rows are summed over the batch in order by one thread. dwpe null: a model without a position
// table, only dwte. `scratch`: device memory of embedding_backward_scratch_bytes.
template <class T>
void launch_embedding_backward(T* dwte, T* dwpe, const T* dx, const std::int32_t* tokens, int batch, int seq, int c,
                               void* scratch, cudaStream_t stream);
// The same over the rows of any BatchShape, as the forward of the same name: dwpe[positions[r],
// :] += dx[r, :], each position's rows summed in row order as each token's are; `scratch` of
// embedding_backward_scratch_bytes(rows).
template <class T>
void launch_embedding_backward(T* dwte, T* dwpe, const T* dx, const std::int32_t* tokens, const std::int32_t* positions,
                               std::int64_t rows, int c, void* scratch, cudaStream_t stream);

}  // namespace sweetspot::gpu
