#include "kernels/compute/embedding.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cub/device/device_radix_sort.cuh>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"

namespace sweetspot::gpu {

namespace {

// Row r's position: r % seq in a rectangular batch, where every sequence is seq rows long.
struct RowModulo {
    int seq;
    __device__ std::int64_t operator()(std::int64_t row) const { return row % seq; }
};

// Row r's position from a table (BatchShape::positions): a ragged batch's sequences restart at
// rows no formula knows.
struct RowTable {
    const std::int32_t* positions;
    __device__ std::int64_t operator()(std::int64_t row) const { return positions[row]; }
};

// x[row, i] = wte[tokens[row], i] + wpe[position(row), i], one thread per element (grid-stride).
// Rows are (batch, position) pairs, so consecutive threads read consecutive elements of one
// embedding row: coalesced gathers without a per-row launch. The position rule is a template
// parameter so the rectangular batch's kernel reads no table.
template <class T, class Position>
__global__ void embedding_kernel(T* x, const std::int32_t* tokens, const T* wte, const T* wpe, std::int64_t bt,
                                 Position position, int c) {
    const std::int64_t n = bt * c;
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        const std::int64_t row = idx / c;
        const std::int64_t i = idx % c;
        const std::int64_t tok = tokens[row];
        x[idx] = from_f32<T>(to_f32(wte[tok * c + i]) + (wpe != nullptr ? to_f32(wpe[position(row) * c + i]) : 0.0f));
    }
}

// rows[i] = i: the values the sort carries along with the tokens.
__global__ void row_numbers_kernel(std::int32_t* rows, std::int64_t n) {
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        rows[idx] = static_cast<std::int32_t>(idx);
    }
}

// Block p of the rows sorted by key (a token, or a position): if it is the first row of its key's
// run, it adds the run's dx rows (in row order, the sort being stable) to the key's row of the
// table's gradient; otherwise nothing.
template <class T>
__global__ void embedding_backward_runs_kernel(T* dtable, const T* dx, const std::int32_t* sorted_keys,
                                               const std::int32_t* sorted_rows, std::int64_t bt, int c) {
    const std::int64_t p = blockIdx.x;
    const std::int32_t key = sorted_keys[p];
    if (p > 0 && sorted_keys[p - 1] == key) return;
    std::int64_t end = p + 1;
    while (end < bt && sorted_keys[end] == key) ++end;
    T* row = dtable + static_cast<std::int64_t>(key) * c;
    for (int i = static_cast<int>(threadIdx.x); i < c; i += static_cast<int>(blockDim.x)) {
        float sum = 0.0f;
        for (std::int64_t q = p; q < end; ++q) sum += to_f32(dx[static_cast<std::int64_t>(sorted_rows[q]) * c + i]);
        row[i] = from_f32<T>(to_f32(row[i]) + sum);
    }
}

// dwpe[t, i] += Σ_b dx[b·seq + t, i], one thread per (t, i), b in order.
template <class T>
__global__ void embedding_backward_wpe_kernel(T* dwpe, const T* dx, int batch, int seq, int c) {
    const std::int64_t n = static_cast<std::int64_t>(seq) * c;
    const std::int64_t stride = n;  // from sample b to b + 1
    for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
         idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
        float sum = 0.0f;
        for (int b = 0; b < batch; ++b) sum += to_f32(dx[b * stride + idx]);
        dwpe[idx] = from_f32<T>(to_f32(dwpe[idx]) + sum);
    }
}

// The scratch of the backward: three int32 arrays of its rows, then the sort's own storage, each
// on 256 bytes.
struct EmbeddingScratch {
    std::int32_t* rows;
    std::int32_t* sorted_keys;
    std::int32_t* sorted_rows;
    void* sort_storage;
    std::size_t sort_bytes;
    std::size_t total;
};

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

EmbeddingScratch embedding_scratch(void* base, std::int64_t bt) {
    std::size_t sort_bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const std::int32_t*>(nullptr),
                                               static_cast<std::int32_t*>(nullptr),
                                               static_cast<const std::int32_t*>(nullptr),
                                               static_cast<std::int32_t*>(nullptr), bt));
    const std::size_t array = aligned(static_cast<std::size_t>(bt) * sizeof(std::int32_t));
    auto* bytes = static_cast<std::byte*>(base);
    return {reinterpret_cast<std::int32_t*>(bytes), reinterpret_cast<std::int32_t*>(bytes + array),
            reinterpret_cast<std::int32_t*>(bytes + 2 * array), bytes + 3 * array, sort_bytes,
            3 * array + aligned(sort_bytes)};
}

}  // namespace

template <class T>
void launch_embedding(T* x, const std::int32_t* tokens, const T* wte, const T* wpe, int batch, int seq, int c,
                      cudaStream_t stream) {
    const std::int64_t bt = static_cast<std::int64_t>(batch) * seq;
    if (bt * c == 0) return;
    embedding_kernel<T><<<elementwise_blocks(bt * c), kBlock, 0, stream>>>(x, tokens, wte, wpe, bt, RowModulo{seq}, c);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_embedding(T* x, const std::int32_t* tokens, const T* wte, const T* wpe, const std::int32_t* positions,
                      std::int64_t rows, int c, cudaStream_t stream) {
    if (rows * c == 0) return;
    embedding_kernel<T>
        <<<elementwise_blocks(rows * c), kBlock, 0, stream>>>(x, tokens, wte, wpe, rows, RowTable{positions}, c);
    CUDA_CHECK_LAUNCH();
}

std::size_t embedding_backward_scratch_bytes(std::int64_t rows) { return embedding_scratch(nullptr, rows).total; }

std::size_t embedding_backward_scratch_bytes(int batch, int seq) {
    return embedding_backward_scratch_bytes(static_cast<std::int64_t>(batch) * seq);
}

namespace {

// dtable[keys[r], :] += dx[r, :] for each of the bt rows, each key's rows summed in row order:
// the rows sorted by key (stably), then one block per run.
template <class T>
void add_rows_by_key(T* dtable, const T* dx, const std::int32_t* keys, std::int64_t bt, int c, EmbeddingScratch s,
                     cudaStream_t stream) {
    row_numbers_kernel<<<elementwise_blocks(bt), kBlock, 0, stream>>>(s.rows, bt);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.sort_storage, s.sort_bytes, keys, s.sorted_keys, s.rows, s.sorted_rows,
                                               bt, 0, 32, stream));
    // bt ≤ 2^31 − 1 for every shape the harness runs (gridDim.x's limit).
    embedding_backward_runs_kernel<T>
        <<<static_cast<unsigned>(bt), kBlock, 0, stream>>>(dtable, dx, s.sorted_keys, s.sorted_rows, bt, c);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void launch_embedding_backward(T* dwte, T* dwpe, const T* dx, const std::int32_t* tokens, int batch, int seq, int c,
                               void* scratch, cudaStream_t stream) {
    const std::int64_t bt = static_cast<std::int64_t>(batch) * seq;
    if (bt * c == 0) return;
    add_rows_by_key(dwte, dx, tokens, bt, c, embedding_scratch(scratch, bt), stream);
    if (dwpe == nullptr) return;
    const std::int64_t positions = static_cast<std::int64_t>(seq) * c;
    embedding_backward_wpe_kernel<T><<<elementwise_blocks(positions), kBlock, 0, stream>>>(dwpe, dx, batch, seq, c);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_embedding_backward(T* dwte, T* dwpe, const T* dx, const std::int32_t* tokens, const std::int32_t* positions,
                               std::int64_t rows, int c, void* scratch, cudaStream_t stream) {
    if (rows * c == 0) return;
    const EmbeddingScratch s = embedding_scratch(scratch, rows);
    add_rows_by_key(dwte, dx, tokens, rows, c, s, stream);
    // The same scratch again: the stream orders this sort after the token rows' sums.
    if (dwpe != nullptr) add_rows_by_key(dwpe, dx, positions, rows, c, s, stream);
}

#define SWEETSPOT_INSTANTIATE(T)                                                                                      \
    template void launch_embedding<T>(T*, const std::int32_t*, const T*, const T*, int, int, int, cudaStream_t);      \
    template void launch_embedding<T>(T*, const std::int32_t*, const T*, const T*, const std::int32_t*, std::int64_t, \
                                      int, cudaStream_t);                                                             \
    template void launch_embedding_backward<T>(T*, T*, const T*, const std::int32_t*, int, int, int, void*,           \
                                               cudaStream_t);                                                         \
    template void launch_embedding_backward<T>(T*, T*, const T*, const std::int32_t*, const std::int32_t*,            \
                                               std::int64_t, int, void*, cudaStream_t);

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
