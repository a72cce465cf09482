// The embedding's entries: the forward (launch_embedding) and its backward
// (launch_embedding_backward).
#include <algorithm>
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/embedding.cuh"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

// dims: batch, seq, c, vocab, positions.
struct EmbeddingShape {
    int batch, seq, c, vocab, positions;
    explicit EmbeddingShape(const OpShape& s)
        : batch(static_cast<int>(s.dims[0])),
          seq(static_cast<int>(s.dims[1])),
          c(static_cast<int>(s.dims[2])),
          vocab(static_cast<int>(s.dims[3])),
          positions(static_cast<int>(s.dims[4])) {}
    std::size_t rows() const { return as_size(batch) * as_size(seq); }
    std::size_t n() const { return rows() * as_size(c); }
};

template <class T>
class EmbeddingCase final : public OpCase {
public:
    EmbeddingCase(const OpShape& shape, cudaStream_t stream)
        : s_(shape),
          wte_(random_values(as_size(s_.vocab) * as_size(s_.c), dtype, kSeed, 0.01f, 1.0f, Sign::either)),
          wpe_(random_values(as_size(s_.positions) * as_size(s_.c), dtype, kSeed + 1, 0.01f, 1.0f, Sign::either)),
          tokens_(random_tokens(s_.rows(), s_.vocab, kSeed + 2)),
          d_wte_(wte_, stream),
          d_wpe_(wpe_, stream),
          d_tokens_(tokens_, stream),
          d_x_(s_.n(), stream) {}

    void run(cudaStream_t stream) override {
        gpu::launch_embedding<T>(d_x_.get(), d_tokens_.get(), d_wte_.get(), d_wpe_.get(), s_.batch, s_.seq, s_.c, stream);
    }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want(s_.n());
        cpu::embedding(want.data(), tokens_.data(), wte_.data(), wpe_.data(), s_.batch, s_.seq, s_.c);
        return compare("x", d_x_.to_host(stream), want);
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    EmbeddingShape s_;
    std::vector<float> wte_, wpe_;
    std::vector<std::int32_t> tokens_;
    DeviceArray<T> d_wte_, d_wpe_;
    DeviceTokens d_tokens_;
    DeviceArray<T> d_x_;
};

// dwte and dwpe start non-zero: the op adds to them.
template <class T>
class EmbeddingBackwardCase final : public OpCase {
public:
    EmbeddingBackwardCase(const OpShape& shape, cudaStream_t stream)
        : s_(shape),
          dx_(random_values(s_.n(), dtype, kSeed, 0.01f, 1.0f, Sign::either)),
          dwte_(random_values(as_size(s_.vocab) * as_size(s_.c), dtype, kSeed + 1, 0.01f, 1.0f, Sign::either)),
          dwpe_(random_values(as_size(s_.positions) * as_size(s_.c), dtype, kSeed + 2, 0.01f, 1.0f, Sign::either)),
          tokens_(random_tokens(s_.rows(), s_.vocab, kSeed + 3)),
          d_dx_(dx_, stream),
          d_dwte_(dwte_, stream),
          d_dwpe_(dwpe_, stream),
          d_tokens_(tokens_, stream),
          scratch_(allocate_device(static_cast<std::int64_t>(gpu::embedding_backward_scratch_bytes(s_.batch, s_.seq)))) {}

    void run(cudaStream_t stream) override {
        gpu::launch_embedding_backward<T>(d_dwte_.get(), d_dwpe_.get(), d_dx_.get(), d_tokens_.get(), s_.batch, s_.seq,
                                          s_.c, scratch_.get(), stream);
    }

    OpError check(cudaStream_t stream) override {
        std::vector<float> dwte = dwte_, dwpe = dwpe_;
        cpu::embedding_backward(dwte.data(), dwpe.data(), dx_.data(), tokens_.data(), s_.batch, s_.seq, s_.c);
        OpError error = compare("dwte", d_dwte_.to_host(stream), dwte);
        error.include(compare("dwpe", d_dwpe_.to_host(stream), dwpe));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    EmbeddingShape s_;
    std::vector<float> dx_, dwte_, dwpe_;
    std::vector<std::int32_t> tokens_;
    DeviceArray<T> d_dx_, d_dwte_, d_dwpe_;
    DeviceTokens d_tokens_;
    DeviceMemory scratch_;
};

OpShape embedding_shape(int batch, int seq, int c, int vocab, int positions) {
    return op_shape({{"batch", batch}, {"seq", seq}, {"c", c}, {"vocab", vocab}, {"positions", positions}});
}

}  // namespace

std::vector<OpEntry> embedding_ops() {
    std::vector<OpEntry> entries;
    entries.push_back(OpEntry{
        .name = "embedding",
        .family = "embedding",
        // seq 1; batch > 1 (sample 1 must restart at position 0); c 75, not a multiple of 8 or 32.
        .test_shapes = {embedding_shape(1, 1, 75, 50, 16), embedding_shape(3, 13, 75, 50, 16),
                        embedding_shape(2, 7, 768, 100, 8)},
        // GPT-2 small and 1.5B at batch 8, seq 1024.
        .bench_shapes = {embedding_shape(8, 1024, 768, 50257, 1024), embedding_shape(8, 1024, 1600, 50257, 1024)},
        .tolerance = store_tolerance,
        // Reads a wte and a wpe row and writes an x row per position (and the token ids, not counted).
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(3.0 * static_cast<double>(EmbeddingShape(s).n()), dtype);
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<EmbeddingCase>(dtype, s, stream);
        },
    });
    entries.push_back(OpEntry{
        .name = "embedding_backward",
        .family = "embedding",
        // The forward's shapes; vocab 5 over 39 rows and vocab 3 over 1200 rows (runs of ~400
        // rows of one token), so tokens repeat and each gets several rows' gradients.
        .test_shapes = {embedding_shape(1, 1, 75, 50, 16), embedding_shape(3, 13, 75, 5, 16),
                        embedding_shape(2, 7, 768, 100, 8), embedding_shape(4, 300, 33, 3, 300)},
        .bench_shapes = {embedding_shape(8, 1024, 768, 50257, 1024), embedding_shape(8, 1024, 1600, 50257, 1024)},
        // dwte and dwpe rows plus their gradients' fp32 sum, stored once to T; both sides sum a
        // token's (a position's) rows in row order, the GPU before adding the old value, the CPU
        // onto it: ≲ 1e-6 apart over ≤ 400 rows, within the fp32 part.
        .tolerance = store_tolerance,
        // dx read by both kernels; read and written: each token's dwte row (≤ batch·seq of them)
        // and each position's dwpe row.
        .cost = [](const OpShape& s, DType dtype) {
            const EmbeddingShape e(s);
            const double rows = static_cast<double>(e.rows());
            const double tokens = std::min(rows, static_cast<double>(e.vocab));
            return memory_cost(static_cast<double>(e.c) * (2.0 * rows + 2.0 * tokens + 2.0 * e.seq), dtype);
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<EmbeddingBackwardCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
