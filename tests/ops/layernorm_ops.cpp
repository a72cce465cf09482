// LayerNorm's entries: the forward (launch_layernorm), the forward that keeps each row's rstd
// (launch_layernorm_keeping_rstd), the backward from the input (launch_layernorm_backward) and,
// for inplace_ln, from the output (launch_layernorm_backward_from_output), and the `residual_ln`
// fusion of dropout, residual add and LayerNorm (launch_residual_layernorm).
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/dropout.cuh"
#include "kernels/compute/layernorm.cuh"
#include "kernels/compute/residual.cuh"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

// dims: rows, c. With keep_rstd, launch_layernorm_keeping_rstd, whose out must be
// launch_layernorm's bit for bit.
template <class T>
class LayernormCase final : public OpCase {
public:
    LayernormCase(const OpShape& shape, cudaStream_t stream, bool keep_rstd)
        : keep_rstd_(keep_rstd),
          rows_(static_cast<int>(shape.dims[0])),
          c_(static_cast<int>(shape.dims[1])),
          // Positive inputs: the mean is far from zero, so a kernel that does not subtract it fails.
          in_(random_values(n(), dtype, kSeed, 0.5f, 3.0f, Sign::positive)),
          w_(random_values(as_size(c_), dtype, kSeed + 1, 0.5f, 1.5f, Sign::positive)),
          b_(random_values(as_size(c_), dtype, kSeed + 2, 0.01f, 0.5f, Sign::either)),
          d_in_(in_, stream),
          d_w_(w_, stream),
          d_b_(b_, stream),
          d_out_(n(), stream),
          d_rstd_(as_size(rows_), stream) {}

    void run(cudaStream_t stream) override {
        if (keep_rstd_) {
            gpu::launch_layernorm_keeping_rstd<T>(d_out_.get(), d_rstd_.get(), d_in_.get(), d_w_.get(), d_b_.get(), rows_,
                                                  c_, kEps, stream);
        } else {
            gpu::launch_layernorm<T>(d_out_.get(), d_in_.get(), d_w_.get(), d_b_.get(), rows_, c_, kEps, stream);
        }
    }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want(n()), want_rstd(as_size(rows_));
        cpu::layernorm(want.data(), in_.data(), w_.data(), b_.data(), rows_, c_, kEps, want_rstd.data());
        const auto out = d_out_.to_host(stream);
        OpError error = compare("out", out, want);
        if (!keep_rstd_) return error;
        // rstd is fp32 on both sides: the store tolerance's fp32 part.
        error.include(compare("rstd", d_rstd_.to_host(stream), want_rstd));
        const DeviceArray<T> plain(n(), stream);
        gpu::launch_layernorm<T>(plain.get(), d_in_.get(), d_w_.get(), d_b_.get(), rows_, c_, kEps, stream);
        error.include(require_equal("out against launch_layernorm's", out, plain.to_host(stream)));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::size_t n() const { return as_size(rows_) * as_size(c_); }

    bool keep_rstd_;
    int rows_, c_;
    std::vector<float> in_, w_, b_;
    DeviceArray<T> d_in_, d_w_, d_b_, d_out_;
    DeviceArray<float> d_rstd_;
};

// dims: rows, c. dx, dw and db start non-zero: the op adds to them.
template <class T>
class LayernormBackwardCase final : public OpCase {
public:
    LayernormBackwardCase(const OpShape& shape, cudaStream_t stream)
        : rows_(static_cast<int>(shape.dims[0])),
          c_(static_cast<int>(shape.dims[1])),
          in_(random_values(n(), dtype, kSeed, 0.5f, 3.0f, Sign::positive)),
          w_(random_values(as_size(c_), dtype, kSeed + 1, 0.5f, 1.5f, Sign::positive)),
          dout_(random_values(n(), dtype, kSeed + 2, 0.01f, 1.0f, Sign::either)),
          dx_(random_values(n(), dtype, kSeed + 3, 0.01f, 1.0f, Sign::either)),
          dw_(random_values(as_size(c_), dtype, kSeed + 4, 0.01f, 1.0f, Sign::either)),
          db_(random_values(as_size(c_), dtype, kSeed + 5, 0.01f, 1.0f, Sign::either)),
          d_in_(in_, stream),
          d_w_(w_, stream),
          d_dout_(dout_, stream),
          d_dx_(dx_, stream),
          d_dw_(dw_, stream),
          d_db_(db_, stream),
          scratch_(allocate_device(gpu::layernorm_backward_scratch_floats(rows_, c_) *
                                   static_cast<std::int64_t>(sizeof(float)))) {}

    void run(cudaStream_t stream) override {
        gpu::launch_layernorm_backward<T>(d_dx_.get(), d_dw_.get(), d_db_.get(), d_dout_.get(), d_in_.get(), d_w_.get(),
                                          rows_, c_, kEps, reinterpret_cast<float*>(scratch_.get()), stream);
    }

    OpError check(cudaStream_t stream) override {
        std::vector<float> dx = dx_, dw = dw_, db = db_;
        cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout_.data(), in_.data(), w_.data(), rows_, c_, kEps);
        const auto got_dx = d_dx_.to_host(stream), got_dw = d_dw_.to_host(stream), got_db = d_db_.to_host(stream);
        OpError error = compare("dx", got_dx, dx);
        error.include(compare("dw", got_dw, dw));
        error.include(compare("db", got_db, db));
        // Again from the same start: the same bits (no floating-point atomics, no order that
        // depends on which block finishes first).
        const DeviceArray<T> again_dx(dx_, stream), again_dw(dw_, stream), again_db(db_, stream);
        gpu::launch_layernorm_backward<T>(again_dx.get(), again_dw.get(), again_db.get(), d_dout_.get(), d_in_.get(),
                                          d_w_.get(), rows_, c_, kEps, reinterpret_cast<float*>(scratch_.get()), stream);
        error.include(require_equal("dx run twice", again_dx.to_host(stream), got_dx));
        error.include(require_equal("dw run twice", again_dw.to_host(stream), got_dw));
        error.include(require_equal("db run twice", again_db.to_host(stream), got_db));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::size_t n() const { return as_size(rows_) * as_size(c_); }

    int rows_, c_;
    std::vector<float> in_, w_, dout_, dx_, dw_, db_;
    DeviceArray<T> d_in_, d_w_, d_dout_, d_dx_, d_dw_, d_db_;
    DeviceMemory scratch_;
};

// dims: rows, c. The backward from the output y, the bias and each row's rstd (inplace_ln): any
// y and positive rstd are valid inputs, and w takes either sign (x̂ divides by it). dx, dw and db
// start non-zero: the op adds to them. The flag for weights too small to divide by stays 0, and
// a run with one weight 0 sets it to the tag.
template <class T>
class LayernormBackwardFromOutputCase final : public OpCase {
public:
    static constexpr int kTag = 7;

    LayernormBackwardFromOutputCase(const OpShape& shape, cudaStream_t stream)
        : rows_(static_cast<int>(shape.dims[0])),
          c_(static_cast<int>(shape.dims[1])),
          y_(random_values(n(), dtype, kSeed, 0.01f, 2.0f, Sign::either)),
          w_(random_values(as_size(c_), dtype, kSeed + 1, 0.5f, 1.5f, Sign::either)),
          b_(random_values(as_size(c_), dtype, kSeed + 2, 0.01f, 0.5f, Sign::either)),
          rstd_(random_values(as_size(rows_), DType::fp32, kSeed + 3, 0.5f, 2.0f, Sign::positive)),
          dout_(random_values(n(), dtype, kSeed + 4, 0.01f, 1.0f, Sign::either)),
          dx_(random_values(n(), dtype, kSeed + 5, 0.01f, 1.0f, Sign::either)),
          dw_(random_values(as_size(c_), dtype, kSeed + 6, 0.01f, 1.0f, Sign::either)),
          db_(random_values(as_size(c_), dtype, kSeed + 7, 0.01f, 1.0f, Sign::either)),
          d_y_(y_, stream),
          d_w_(w_, stream),
          d_b_(b_, stream),
          d_rstd_(rstd_, stream),
          d_dout_(dout_, stream),
          d_dx_(dx_, stream),
          d_dw_(dw_, stream),
          d_db_(db_, stream),
          scratch_(allocate_device(gpu::layernorm_backward_scratch_floats(rows_, c_) *
                                   static_cast<std::int64_t>(sizeof(float)))),
          flag_(allocate_device(sizeof(int))) {
        CUDA_CHECK(cudaMemsetAsync(flag_.get(), 0, sizeof(int), stream));
    }

    void run(cudaStream_t stream) override { run_into(d_dx_, d_dw_, d_db_, d_w_, stream); }

    OpError check(cudaStream_t stream) override {
        std::vector<float> dx = dx_, dw = dw_, db = db_;
        cpu::layernorm_backward_from_output(dx.data(), dw.data(), db.data(), dout_.data(), y_.data(), w_.data(),
                                            b_.data(), rstd_.data(), rows_, c_);
        const auto got_dx = d_dx_.to_host(stream), got_dw = d_dw_.to_host(stream), got_db = d_db_.to_host(stream);
        OpError error = compare("dx", got_dx, dx);
        error.include(compare("dw", got_dw, dw));
        error.include(compare("db", got_db, db));
        error.include(require_equal("unrecoverable flag", {static_cast<float>(flag(stream))}, {0.0f}));
        // Again from the same start: the same bits.
        const DeviceArray<T> again_dx(dx_, stream), again_dw(dw_, stream), again_db(db_, stream);
        run_into(again_dx, again_dw, again_db, d_w_, stream);
        error.include(require_equal("dx run twice", again_dx.to_host(stream), got_dx));
        error.include(require_equal("dw run twice", again_dw.to_host(stream), got_dw));
        error.include(require_equal("db run twice", again_db.to_host(stream), got_db));
        // A weight of 0 in the last channel: reported.
        std::vector<float> zeroed = w_;
        zeroed.back() = 0.0f;
        const DeviceArray<T> d_zeroed(zeroed, stream);
        run_into(again_dx, again_dw, again_db, d_zeroed, stream);
        error.include(require_equal("unrecoverable flag after a zero weight", {static_cast<float>(flag(stream))},
                                    {static_cast<float>(kTag)}));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::size_t n() const { return as_size(rows_) * as_size(c_); }

    void run_into(const DeviceArray<T>& dx, const DeviceArray<T>& dw, const DeviceArray<T>& db, const DeviceArray<T>& w,
                  cudaStream_t stream) {
        gpu::launch_layernorm_backward_from_output<T>(dx.get(), dw.get(), db.get(), d_dout_.get(), d_y_.get(), w.get(),
                                                      d_b_.get(), d_rstd_.get(), rows_, c_,
                                                      reinterpret_cast<float*>(scratch_.get()),
                                                      reinterpret_cast<int*>(flag_.get()), kTag, stream);
    }

    int flag(cudaStream_t stream) const {
        int value = -1;
        CUDA_CHECK(cudaMemcpyAsync(&value, flag_.get(), sizeof value, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return value;
    }

    int rows_, c_;
    std::vector<float> y_, w_, b_, rstd_, dout_, dx_, dw_, db_;
    DeviceArray<T> d_y_, d_w_, d_b_;
    DeviceArray<float> d_rstd_;
    DeviceArray<T> d_dout_, d_dx_, d_dw_, d_db_;
    DeviceMemory scratch_, flag_;
};

// dims: batch, seq, c, p% (the dropout's probability, in percent).
template <class T>
class ResidualLayernormCase final : public OpCase {
public:
    ResidualLayernormCase(const OpShape& shape, cudaStream_t stream)
        : seq_(static_cast<int>(shape.dims[1])),
          c_(static_cast<int>(shape.dims[2])),
          rows_(static_cast<int>(shape.dims[0]) * seq_),
          d_(Dropout{static_cast<float>(shape.dims[3]) / 100.0f, 9}.for_shape(seq_, 64)),
          x_(random_values(n(), dtype, kSeed, 0.01f, 2.0f, Sign::either)),
          y_(random_values(n(), dtype, kSeed + 1, 0.01f, 2.0f, Sign::either)),
          w_(random_values(as_size(c_), dtype, kSeed + 2, 0.5f, 1.5f, Sign::positive)),
          b_(random_values(as_size(c_), dtype, kSeed + 3, 0.01f, 0.5f, Sign::either)),
          d_x_(x_, stream),
          d_y_(y_, stream),
          d_w_(w_, stream),
          d_b_(b_, stream),
          d_out_(n(), stream) {}

    void run(cudaStream_t stream) override {
        gpu::launch_residual_layernorm<T>(d_out_.get(), d_x_.get(), d_y_.get(), d_, 2, d_w_.get(), d_b_.get(), rows_, c_,
                                          kEps, stream);
    }

    OpError check(cudaStream_t stream) override {
        const auto out = d_out_.to_host(stream);
        const auto x = d_x_.to_host(stream);
        // The three kernels the fusion replaces.
        const DeviceArray<T> px(x_, stream), py(y_, stream), p_out(n(), stream);
        gpu::launch_dropout<T>(py.get(), rows_, c_, d_, 2, stream);
        gpu::launch_residual_add<T>(px.get(), py.get(), static_cast<std::int64_t>(n()), stream);
        gpu::launch_layernorm<T>(p_out.get(), px.get(), d_w_.get(), d_b_.get(), rows_, c_, kEps, stream);

        std::vector<float> want_x = x_, dropped = y_, want(n());
        cpu::dropout_rows(dropped.data(), rows_, c_, d_, 2);
        cpu::residual_add(want_x.data(), dropped.data(), static_cast<std::int64_t>(n()));
        cpu::layernorm(want.data(), want_x.data(), w_.data(), b_.data(), rows_, c_, kEps);
        OpError error = compare("out", out, want);
        error.include(compare("x", x, want_x));
        // The fused kernel rounds where the three kernels store: the same numbers, x included.
        error.include(require_equal("out against dropout, residual add and layernorm", out, p_out.to_host(stream)));
        error.include(require_equal("x against dropout and residual add", x, px.to_host(stream)));
        return error;
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    std::size_t n() const { return as_size(rows_) * as_size(c_); }

    int seq_, c_, rows_;
    Dropout d_;
    std::vector<float> x_, y_, w_, b_;
    DeviceArray<T> d_x_, d_y_, d_w_, d_b_, d_out_;
};

OpShape residual_ln_shape(int batch, int seq, int c, int p_percent) {
    return op_shape({{"batch", batch}, {"seq", seq}, {"c", c}, {"p%", p_percent}});
}

OpShape rows_c(std::int64_t rows, std::int64_t c) { return op_shape({{"rows", rows}, {"c", c}}); }

// GPT-2 small and 1.5B at batch 8, seq 1024, and 1.5B at the training study's batch 16.
const std::vector<OpShape> kModelRows = {rows_c(8 * 1024, 768), rows_c(8 * 1024, 1600), rows_c(16 * 1024, 1600)};

// The backward's shapes: c 75 (no whole 16-byte packs) takes the block-per-row path, 768 and
// 1600 the warp-per-row one (1600: 200 bf16 packs, a last round of 8 of the 32 lanes; 400 fp32
// packs, 13 rounds). 1100 rows of 75, more than the 512 blocks (each then takes several rows, and
// 512 partial rows are summed); 9000 of 200, more than the warp path's 4096 warps (each adds 2 or
// 3 rows into its sums; 25 bf16 packs, 50 fp32); c 100, whole packs in fp32 (25) but not in fp16
// or bf16; c 7000, too long for the warp path's registers, whose 2c fp32 accumulators need more
// than the default 48 KiB of shared memory; c 777 and 33, odd.
const std::vector<OpShape> kBackwardShapes = {rows_c(1, 75),    rows_c(13, 75),    rows_c(5, 768),  rows_c(3, 1600),
                                              rows_c(1100, 75), rows_c(9000, 200), rows_c(40, 100), rows_c(2, 7000),
                                              rows_c(7, 777),   rows_c(5, 33)};

}  // namespace

std::vector<OpEntry> layernorm_ops() {
    std::vector<OpEntry> entries;
    entries.push_back(OpEntry{
        .name = "layernorm",
        .family = "layernorm",
        // One row; more rows than the 8 warps of one block; c 75 (a partial last warp-stride),
        // GPT-2 small's 768 and 1.5B's 1600.
        .test_shapes = {rows_c(1, 75), rows_c(13, 75), rows_c(5, 768), rows_c(3, 1600)},
        .bench_shapes = kModelRows,
        .tolerance = store_tolerance,
        // Reads in, writes out; w and b are read once per block from cache.
        .cost = [](const OpShape& s, DType dtype) {
            return OpCost{0, 2.0 * static_cast<double>(s.dims[0] * s.dims[1]) * static_cast<double>(dtype_size(dtype))};
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<LayernormCase>(dtype, s, stream, false);
        },
    });
    entries.push_back(OpEntry{
        .name = "layernorm_keeping_rstd",
        .family = "layernorm",
        .test_shapes = {rows_c(1, 75), rows_c(13, 75), rows_c(5, 768), rows_c(3, 1600), rows_c(7, 777), rows_c(5, 33)},
        .bench_shapes = kModelRows,
        // out as layernorm's (and the same bits); rstd fp32 on both sides, its sums in another order.
        .tolerance = store_tolerance,
        // layernorm's, and the rstd of each row.
        .cost = [](const OpShape& s, DType dtype) {
            return OpCost{0, 2.0 * static_cast<double>(s.dims[0] * s.dims[1]) * static_cast<double>(dtype_size(dtype)) +
                                 4.0 * static_cast<double>(s.dims[0])};
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<LayernormCase>(dtype, s, stream, true);
        },
    });
    entries.push_back(OpEntry{
        .name = "layernorm_backward",
        .family = "layernorm",
        .test_shapes = kBackwardShapes,
        .bench_shapes = kModelRows,
        // Each output is stored once, to T, from fp32 on both sides: dx from its row's sums (c
        // terms, in another order), dw and db from sums over the rows (in another order: by block,
        // then over the blocks). Those orders differ by ~1e-6 of the result at these sizes, within
        // the store tolerance's fp32 part.
        .tolerance = store_tolerance,
        // Reads in, dout and dx, writes dx; w, dw and db are a row each.
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(4.0 * static_cast<double>(s.dims[0] * s.dims[1]), dtype);
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<LayernormBackwardCase>(dtype, s, stream);
        },
    });
    entries.push_back(OpEntry{
        .name = "layernorm_backward_from_output",
        .family = "layernorm",
        .test_shapes = kBackwardShapes,
        .bench_shapes = kModelRows,
        // layernorm_backward's: each output stored once from fp32 sums in another order; x̂ is the
        // same fp32 division (layernorm_recovery.hpp) on both sides.
        .tolerance = store_tolerance,
        // Reads y, dout and dx, writes dx, and each row's rstd; w, b, dw and db are a row each.
        .cost = [](const OpShape& s, DType dtype) {
            OpCost cost = memory_cost(4.0 * static_cast<double>(s.dims[0] * s.dims[1]), dtype);
            cost.bytes += 4.0 * static_cast<double>(s.dims[0]);
            return cost;
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<LayernormBackwardFromOutputCase>(dtype, s, stream);
        },
    });
    entries.push_back(OpEntry{
        .name = "residual_layernorm",
        .family = "layernorm",
        // c 25 and 77 (not multiples of the warp or of 8), a single position, GPT-2 small's 768;
        // without dropout and with p = 0.25.
        .test_shapes = {residual_ln_shape(1, 1, 25, 0), residual_ln_shape(2, 13, 77, 0), residual_ln_shape(3, 40, 768, 0),
                        residual_ln_shape(1, 1, 25, 25), residual_ln_shape(2, 13, 77, 25),
                        residual_ln_shape(3, 40, 768, 25)},
        .bench_shapes = {residual_ln_shape(8, 1024, 768, 0), residual_ln_shape(8, 1024, 1600, 0),
                         residual_ln_shape(8, 1024, 1600, 10)},
        // x rounds once (twice with dropout: the dropped y, then the sum), and the LayerNorm of a
        // rounded x rounds again: up to three stores, each scaled by the normalization
        // (|w|·|x − mean|/σ, a few units). 4× the store tolerance.
        .tolerance = [](DType dtype) { return 4.0 * store_tolerance(dtype); },
        // Reads x and y, writes x and out; w and b from cache.
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(4.0 * static_cast<double>(s.dims[0] * s.dims[1] * s.dims[2]), dtype);
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<ResidualLayernormCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
