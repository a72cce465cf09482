// GPU kernels not yet made op entries (tests/ops, test_ops.cpp), and attention (gpu_attention.hpp),
// run on its own against its CPU operation (cpu_ops.hpp), in fp32, fp16 and bf16: llm.c's habit
// of giving each kernel its own reference, so a wrong kernel is named by its test rather than
// found as a logits mismatch of the whole forward. The inputs are seeded non-zero random values
// rounded to the dtype first, so both sides compute from identical numbers.
//
// Every test needs a CUDA device ([gpu]); the CPU operations' own tests, which need none, are in
// test_kernels.cpp, so they also run where CUDA is absent.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/gemm.hpp"
#include "kernels/compute/gpu_attention.hpp"
#include "kernels/compute/gpu_kernels.cuh"
#include "kernels/compute/gpu_synthetic_weights.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "kernels/model/weight_layout.hpp"
#include "gpu_test_support.hpp"
#include "ops/op_support.hpp"

using namespace sweetspot;
using namespace sweetspot::ops;
using sweetspot::test::require_gpu;

namespace {

// One output against its CPU operation's, within `tolerance` (ops::compare says how it measures).
void check_close(const std::vector<float>& gpu, const std::vector<float>& cpu, double tolerance) {
    const ops::OpError error = ops::compare("out", gpu, cpu);
    INFO("relative error " << error.rel_err << ", tolerance " << tolerance << "; " << error.worst);
    CHECK(error.nonfinite == 0);
    CHECK(error.rel_err <= tolerance);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Element-wise and row-wise kernels (gpu_kernels.cuh)

TEMPLATE_TEST_CASE("launch_embedding matches cpu::embedding", "[gpu]", float, __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    struct Shape {
        int batch, seq, c, vocab, positions;
    };
    // seq 1; batch > 1 (sample 1 must restart at position 0); c 75, not a multiple of 8 or 32.
    for (const Shape s : {Shape{1, 1, 75, 50, 16}, Shape{3, 13, 75, 50, 16}, Shape{2, 7, 768, 100, 8}}) {
        INFO(enum_name(dtype) << " batch " << s.batch << " seq " << s.seq << " c " << s.c);
        const std::size_t rows = as_size(s.batch) * as_size(s.seq);
        const std::size_t c = as_size(s.c);
        const auto wte = random_values(as_size(s.vocab) * c, dtype, kSeed, 0.01f, 1.0f, Sign::either);
        const auto wpe = random_values(as_size(s.positions) * c, dtype, kSeed + 1, 0.01f, 1.0f, Sign::either);
        std::mt19937_64 gen(kSeed + 2);
        std::uniform_int_distribution<std::int32_t> token(0, s.vocab - 1);
        std::vector<std::int32_t> tokens(rows);
        for (auto& t : tokens) t = token(gen);

        const DeviceArray<T> d_wte(wte, stream.get()), d_wpe(wpe, stream.get());
        const DeviceArray<T> d_x(rows * c, stream.get());
        const DeviceMemory d_tokens = allocate_device(static_cast<std::int64_t>(rows * sizeof(std::int32_t)));
        CUDA_CHECK(cudaMemcpyAsync(d_tokens.get(), tokens.data(), rows * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                                   stream.get()));
        gpu::launch_embedding<T>(d_x.get(), reinterpret_cast<const std::int32_t*>(d_tokens.get()), d_wte.get(),
                                 d_wpe.get(), s.batch, s.seq, s.c, stream.get());

        std::vector<float> want(rows * c);
        cpu::embedding(want.data(), tokens.data(), wte.data(), wpe.data(), s.batch, s.seq, s.c);
        check_close(d_x.to_host(stream.get()), want, store_tolerance(dtype));
    }
}

TEMPLATE_TEST_CASE("launch_add_bias matches cpu::add_bias", "[gpu]", float, __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    struct Shape {
        std::int64_t rows, cols;
    };
    // One row; qkv's 3c = 225; past the grid cap (each thread then adds to several rows).
    for (const Shape s : {Shape{1, 75}, Shape{6, 225}, Shape{kPastGridCap / 75, 75}}) {
        INFO(enum_name(dtype) << " rows " << s.rows << " cols " << s.cols);
        const std::size_t n = as_size(s.rows) * as_size(s.cols);
        auto y = random_values(n, dtype, kSeed, 0.01f, 2.0f, Sign::either);
        const auto bias = random_values(as_size(s.cols), dtype, kSeed + 1, 0.01f, 1.0f, Sign::either);

        const DeviceArray<T> d_y(y, stream.get()), d_bias(bias, stream.get());
        gpu::launch_add_bias<T>(d_y.get(), d_bias.get(), s.rows, s.cols, stream.get());

        cpu::add_bias(y.data(), bias.data(), s.rows, s.cols);
        check_close(d_y.to_host(stream.get()), y, store_tolerance(dtype));
    }
}

TEMPLATE_TEST_CASE("launch_gelu_tanh matches cpu::gelu_tanh", "[gpu]", float, __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    for (const std::int64_t n : {std::int64_t{1}, std::int64_t{4 * 75 * 7}, kPastGridCap}) {
        INFO(enum_name(dtype) << " n " << n);
        // ±6 reaches both tails, where tanh saturates and GELU tends to x and to 0.
        auto x = random_values(as_size(n), dtype, kSeed, 0.01f, 6.0f, Sign::either);

        const DeviceArray<T> d_x(x, stream.get());
        gpu::launch_gelu_tanh<T>(d_x.get(), n, stream.get());

        cpu::gelu_tanh(x.data(), n);
        check_close(d_x.to_host(stream.get()), x, store_tolerance(dtype));
    }
}

TEMPLATE_TEST_CASE("launch_residual_add matches cpu::residual_add", "[gpu]", float, __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    for (const std::int64_t n : {std::int64_t{1}, std::int64_t{13 * 75}, kPastGridCap}) {
        INFO(enum_name(dtype) << " n " << n);
        auto x = random_values(as_size(n), dtype, kSeed, 0.01f, 4.0f, Sign::either);
        const auto y = random_values(as_size(n), dtype, kSeed + 1, 0.01f, 1.0f, Sign::either);

        const DeviceArray<T> d_x(x, stream.get()), d_y(y, stream.get());
        gpu::launch_residual_add<T>(d_x.get(), d_y.get(), n, stream.get());

        cpu::residual_add(x.data(), y.data(), n);
        check_close(d_x.to_host(stream.get()), x, store_tolerance(dtype));
    }
}

TEMPLATE_TEST_CASE("launch_count_nonfinite counts the NaN and infinite values, past the grid cap too", "[gpu]", float,
                   __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    const DeviceMemory count = allocate_device(sizeof(unsigned long long));
    auto* d_count = reinterpret_cast<unsigned long long*>(count.get());
    const auto counted = [&](const std::vector<float>& values) {
        const DeviceArray<T> d_x(values, stream.get());
        gpu::launch_count_nonfinite<T>(d_x.get(), static_cast<std::int64_t>(values.size()), d_count, stream.get());
        unsigned long long host = 0;
        CUDA_CHECK(cudaMemcpyAsync(&host, d_count, sizeof host, cudaMemcpyDeviceToHost, stream.get()));
        CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        return host;
    };
    for (const std::int64_t n : {std::int64_t{1}, std::int64_t{13 * 75}, kPastGridCap}) {
        INFO(enum_name(dtype) << " n " << n);
        auto x = random_values(as_size(n), dtype, kSeed, 0.01f, 4.0f, Sign::either);
        CHECK(counted(x) == 0);  // the count starts from zero each launch
        // Bad values at both ends and, past the grid cap, where the grid-stride loop comes round.
        x.front() = std::numeric_limits<float>::quiet_NaN();
        x.back() = -std::numeric_limits<float>::infinity();
        std::uint64_t planted = n == 1 ? 1 : 2;
        if (n == kPastGridCap) {
            for (const std::int64_t i : {n / 2, n - 7}) x[as_size(i)] = std::numeric_limits<float>::infinity();
            planted += 2;
        }
        CHECK(counted(x) == planted);
    }
}

TEST_CASE("gpu::fill_synthetic_unit makes the host's synthetic weights bit for bit, in every dtype", "[gpu]") {
    require_gpu();
    const CudaStream stream;
    // tiny_odd has padding in its units, and tensors whose size is no multiple of a vector store;
    // `wide`'s embedding ((17,000 + 64) × 1,024 values) is past the fill kernel's grid cap (8,192
    // blocks of 256 threads, 16 bytes each: 16.8 M 16-bit values), so the grid-stride loop comes round.
    for (const ModelConfig& model : {*find_builtin_model("tiny_odd"), ModelConfig{"wide", 1, 1024, 8, 17000, 64, 1e-5f}}) {
        const auto layout = WeightLayout::for_model(model);
        for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
            for (int unit = 0; unit < static_cast<int>(layout.units.size()); ++unit) {
                INFO(model.name << " " << enum_name(dtype) << " unit " << unit);
                std::vector<float> values(static_cast<std::size_t>(layout.units[static_cast<std::size_t>(unit)].numel));
                fill_synthetic_unit(model, layout, unit, kSeed, values);
                std::vector<std::byte> want(values.size() * dtype_size(dtype));
                convert_from_f32(values, dtype, want.data());

                const DeviceMemory d = allocate_device(static_cast<std::int64_t>(want.size()));
                CUDA_CHECK(cudaMemsetAsync(d.get(), 0xFF, want.size(), stream.get()));  // NaN: nothing left unwritten
                gpu::fill_synthetic_unit(model, layout, unit, kSeed, dtype, d.get(), stream.get());
                std::vector<std::byte> got(want.size());
                CUDA_CHECK(cudaMemcpyAsync(got.data(), d.get(), got.size(), cudaMemcpyDeviceToHost, stream.get()));
                CUDA_CHECK(cudaStreamSynchronize(stream.get()));
                const auto differ = std::mismatch(want.begin(), want.end(), got.begin());
                CHECK(differ.first == want.end());
            }
        }
    }
    // A destination not on 16 bytes (one value in) is written value by value, to the same bits.
    const ModelConfig model = *find_builtin_model("tiny_odd");
    const auto layout = WeightLayout::for_model(model);
    for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
        INFO(enum_name(dtype) << " one value past 16 bytes");
        std::vector<float> values(static_cast<std::size_t>(layout.units[1].numel));
        fill_synthetic_unit(model, layout, 1, kSeed, values);
        std::vector<std::byte> want(values.size() * dtype_size(dtype));
        convert_from_f32(values, dtype, want.data());
        const DeviceMemory d = allocate_device(static_cast<std::int64_t>(want.size() + dtype_size(dtype)));
        CUDA_CHECK(cudaMemsetAsync(d.get(), 0xFF, want.size() + dtype_size(dtype), stream.get()));
        auto* shifted = static_cast<std::byte*>(d.get()) + dtype_size(dtype);
        gpu::fill_synthetic_unit(model, layout, 1, kSeed, dtype, shifted, stream.get());
        std::vector<std::byte> got(want.size());
        CUDA_CHECK(cudaMemcpyAsync(got.data(), shifted, got.size(), cudaMemcpyDeviceToHost, stream.get()));
        CUDA_CHECK(cudaStreamSynchronize(stream.get()));
        CHECK(std::mismatch(want.begin(), want.end(), got.begin()).first == want.end());
    }
}

TEMPLATE_TEST_CASE("mask + softmax (baseline) and the fused causal softmax match cpu::causal_softmax", "[gpu]", float,
                   __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    struct Shape {
        int blocks;  // (batch, head) pairs, each seq rows
        int seq;
        float offset;  // added to every score
    };
    // seq 1 (a single column, always 1); 13; 300, longer than the kernel's 256 threads; scores
    // near 94, whose exp overflows fp32, so only a kernel that subtracts the row max passes.
    for (const Shape s : {Shape{6, 1, 0.0f}, Shape{6, 13, 0.0f}, Shape{2, 300, 0.0f}, Shape{4, 37, 90.0f}}) {
        INFO(enum_name(dtype) << " blocks " << s.blocks << " seq " << s.seq << " offset " << s.offset);
        const std::int64_t rows = static_cast<std::int64_t>(s.blocks) * s.seq;
        const std::size_t n = as_size(rows) * as_size(s.seq);
        auto scores = random_values(n, dtype, kSeed, 0.01f, 4.0f, Sign::either);
        for (float& v : scores) v += s.offset;
        round_through_dtype(scores, dtype);

        const DeviceArray<T> d_scores(scores, stream.get()), d_fused(scores, stream.get());
        gpu::launch_causal_mask<T>(d_scores.get(), rows, s.seq, stream.get());
        gpu::launch_softmax<T>(d_scores.get(), rows, s.seq, stream.get());
        const auto got = d_scores.to_host(stream.get());
        gpu::launch_causal_softmax_dropout<T>(d_fused.get(), rows, s.seq, Dropout{}, 0, stream.get());
        const auto fused = d_fused.to_host(stream.get());

        cpu::causal_softmax(scores.data(), rows, s.seq);
        check_close(got, scores, store_tolerance(dtype));
        // The fusion computes the same numbers: the masked columns add exp(−inf) = 0 to the sums.
        CHECK(fused == got);
        // The masked columns must be exact zeros: P·V runs over the full row.
        std::size_t masked_nonzero = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
            for (int j = static_cast<int>(r % s.seq) + 1; j < s.seq; ++j) {
                masked_nonzero += got[as_size(r) * as_size(s.seq) + as_size(j)] != 0.0f;
            }
        }
        CHECK(masked_nonzero == 0);
    }
}

// Dropout with p = 0.25 on both sides: the masks are drawn from the same counters, so the kept
// elements and their scale agree exactly; only the store to T rounds.
Dropout test_dropout(int seq, int positions) { return Dropout{0.25f, 42}.for_shape(seq, positions); }

TEMPLATE_TEST_CASE("launch_dropout and launch_dropout_probabilities match cpu::dropout_rows and "
                   "cpu::dropout_probabilities",
                   "[gpu]", float, __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    struct Shape {
        int seq, positions;
        std::int64_t rows;
        int width;
    };
    for (const Shape s : {Shape{1, 1, 3, 25}, Shape{13, 40, 26, 77}, Shape{7, 7, 70, 7}}) {
        INFO(enum_name(dtype) << " seq " << s.seq << " rows " << s.rows << " width " << s.width);
        const Dropout d = test_dropout(s.seq, s.positions);
        const auto n = as_size(s.rows) * as_size(s.width);
        auto x = random_values(n, dtype, kSeed, 0.01f, 1.0f, Sign::either);
        auto p = x;
        const DeviceArray<T> d_x(x, stream.get());
        gpu::launch_dropout<T>(d_x.get(), s.rows, s.width, d, 3, stream.get());
        cpu::dropout_rows(x.data(), s.rows, s.width, d, 3);
        const auto got = d_x.to_host(stream.get());
        check_close(got, x, store_tolerance(dtype));
        const auto zeros = std::count(got.begin(), got.end(), 0.0f);
        CHECK(zeros == std::count(x.begin(), x.end(), 0.0f));
        CHECK(zeros > 0);  // p = 0.25 over these sizes drops something

        // Probabilities are rows of seq: reuse the values as [rows·width / seq, seq].
        const std::int64_t prob_rows = static_cast<std::int64_t>(n) / s.seq;
        p.resize(as_size(prob_rows) * as_size(s.seq));
        const DeviceArray<T> d_p(p, stream.get());
        gpu::launch_dropout_probabilities<T>(d_p.get(), prob_rows, d, 5, stream.get());
        cpu::dropout_probabilities(p.data(), 0, prob_rows, d, 5);
        check_close(d_p.to_host(stream.get()), p, store_tolerance(dtype));
    }
}

TEMPLATE_TEST_CASE("the fused causal softmax with dropout matches cpu::causal_softmax then cpu::dropout_probabilities",
                   "[gpu]", float, __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    for (const int seq : {1, 25, 300}) {
        INFO(enum_name(dtype) << " seq " << seq);
        const std::int64_t rows = 3 * static_cast<std::int64_t>(seq);
        const Dropout d = test_dropout(seq, 512);
        auto scores = random_values(as_size(rows) * as_size(seq), dtype, kSeed, 0.01f, 4.0f, Sign::either);
        const DeviceArray<T> d_fused(scores, stream.get()), d_parts(scores, stream.get());
        gpu::launch_causal_softmax_dropout<T>(d_fused.get(), rows, seq, d, 7, stream.get());
        gpu::launch_causal_mask<T>(d_parts.get(), rows, seq, stream.get());
        gpu::launch_softmax<T>(d_parts.get(), rows, seq, stream.get());
        gpu::launch_dropout_probabilities<T>(d_parts.get(), rows, d, 7, stream.get());
        const auto fused = d_fused.to_host(stream.get());
        CHECK(fused == d_parts.to_host(stream.get()));  // one kernel, the same numbers as three

        cpu::causal_softmax(scores.data(), rows, seq);
        cpu::dropout_probabilities(scores.data(), 0, rows, d, 7);
        check_close(fused, scores, 2.0 * store_tolerance(dtype));
    }
}

TEMPLATE_TEST_CASE("launch_residual_layernorm matches dropout, residual add and layernorm, on the CPU and on the GPU",
                   "[gpu]", float, __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    struct Shape {
        int batch, seq, c;
    };
    // c 25 and 77 (not multiples of the warp or of 8), a single position, GPT-2 small's 768.
    for (const Shape s : {Shape{1, 1, 25}, Shape{2, 13, 77}, Shape{3, 40, 768}}) {
        for (const float p : {0.0f, 0.25f}) {
            INFO(enum_name(dtype) << " batch " << s.batch << " seq " << s.seq << " c " << s.c << " p " << p);
            const int rows = s.batch * s.seq;
            const auto n = as_size(rows) * as_size(s.c);
            const Dropout d = Dropout{p, 9}.for_shape(s.seq, 64);
            auto x = random_values(n, dtype, kSeed, 0.01f, 2.0f, Sign::either);
            auto y = random_values(n, dtype, kSeed + 1, 0.01f, 2.0f, Sign::either);
            const auto w = random_values(as_size(s.c), dtype, kSeed + 2, 0.5f, 1.5f, Sign::positive);
            const auto b = random_values(as_size(s.c), dtype, kSeed + 3, 0.01f, 0.5f, Sign::either);

            const DeviceArray<T> fx(x, stream.get()), fy(y, stream.get()), px(x, stream.get()), py(y, stream.get());
            const DeviceArray<T> dw(w, stream.get()), db(b, stream.get());
            const DeviceArray<T> f_out(std::vector<float>(n, 1.0f), stream.get()), p_out(std::vector<float>(n, 1.0f), stream.get());
            gpu::launch_residual_layernorm<T>(f_out.get(), fx.get(), fy.get(), d, 2, dw.get(), db.get(), rows, s.c, kEps,
                                              stream.get());
            gpu::launch_dropout<T>(py.get(), rows, s.c, d, 2, stream.get());
            gpu::launch_residual_add<T>(px.get(), py.get(), static_cast<std::int64_t>(n), stream.get());
            gpu::launch_layernorm<T>(p_out.get(), px.get(), dw.get(), db.get(), rows, s.c, kEps, stream.get());
            const auto got = f_out.to_host(stream.get());
            // The fused kernel rounds where the three kernels store: the same numbers, x included.
            CHECK(got == p_out.to_host(stream.get()));
            CHECK(fx.to_host(stream.get()) == px.to_host(stream.get()));

            cpu::dropout_rows(y.data(), rows, s.c, d, 2);
            cpu::residual_add(x.data(), y.data(), static_cast<std::int64_t>(n));
            std::vector<float> want(n);
            cpu::layernorm(want.data(), x.data(), w.data(), b.data(), rows, s.c, kEps);
            check_close(got, want, 4.0 * store_tolerance(dtype));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Attention (gpu_attention.hpp): cuBLAS, the softmax kernel, cuBLAS

TEMPLATE_TEST_CASE("gpu::attention matches cpu::attention", "[gpu]", float, __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    Gemm gemm(dtype, stream.get(), /*tf32=*/false);
    struct Shape {
        int batch, seq, c, n_head;
    };
    // seq 1; head dim 25 with c 75 (odd leading dimensions 225 and 75) and batch > 1; a longer
    // sequence; head dim 130 as gpt3_13b_seed.
    for (const Shape s : {Shape{1, 1, 75, 3}, Shape{2, 13, 75, 3}, Shape{3, 64, 75, 3}, Shape{2, 17, 520, 4}}) {
        INFO(enum_name(dtype) << " batch " << s.batch << " seq " << s.seq << " c " << s.c << " heads " << s.n_head
                               << " (head dim " << s.c / s.n_head << ")");
        const std::size_t rows = as_size(s.batch) * as_size(s.seq);
        const std::size_t c = as_size(s.c);
        const auto qkv = attention_inputs(rows, c, dtype);

        const DeviceArray<T> d_qkv(qkv, stream.get());
        const DeviceArray<T> d_scores(as_size(s.batch) * as_size(s.n_head) * as_size(s.seq) * as_size(s.seq),
                                      stream.get());
        const DeviceArray<T> d_out(rows * c, stream.get());
        gpu::attention<T>(gemm, d_out.get(), d_scores.get(), d_qkv.get(), s.batch, s.seq, s.c, s.n_head);

        std::vector<float> want(rows * c);
        std::vector<float> scratch(as_size(s.seq) * as_size(s.seq));
        cpu::attention(want.data(), scratch.data(), qkv.data(), s.batch, s.seq, s.c, s.n_head);
        check_close(d_out.to_host(stream.get()), want, attention_tolerance(dtype));
    }
}

TEMPLATE_TEST_CASE("gpu::flash_attention matches cpu::attention, with and without dropout", "[gpu]", float, __half,
                   __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    struct Shape {
        int batch, seq, c, n_head;
    };
    // seq 1; head dim 25 (c 75) over several key tiles and a partial last row block; 64 and 128,
    // GPT-2's and GPT-3's; 32, 80 and 96, the other tensor-core head dims; 130 as gpt3_13b_seed;
    // 192 and 256, the register-tiled kernel's widest tiles; 320 and 512 (the largest the kernels
    // take), the quad kernel's; seq 777.
    for (const Shape s : {Shape{1, 1, 75, 3}, Shape{2, 77, 75, 3}, Shape{2, 100, 128, 2}, Shape{1, 130, 256, 2},
                          Shape{1, 50, 64, 2}, Shape{2, 65, 160, 2}, Shape{2, 90, 192, 2}, Shape{2, 17, 520, 4},
                          Shape{2, 70, 384, 2}, Shape{1, 129, 256, 1}, Shape{1, 33, 320, 1}, Shape{1, 40, 512, 1},
                          Shape{1, 777, 160, 2}}) {
        for (const float p : {0.0f, 0.2f}) {
            INFO(enum_name(dtype) << " batch " << s.batch << " seq " << s.seq << " c " << s.c << " heads " << s.n_head
                                   << " (head dim " << s.c / s.n_head << "), dropout " << p);
            const std::size_t rows = as_size(s.batch) * as_size(s.seq);
            const std::size_t c = as_size(s.c);
            const auto qkv = attention_inputs(rows, c, dtype);
            const Dropout dropout = Dropout{p, 3}.for_shape(s.seq, 1024);
            const DeviceArray<T> d_qkv(qkv, stream.get());
            const DeviceArray<T> d_out(rows * c, stream.get());
            gpu::flash_attention<T>(d_out.get(), d_qkv.get(), s.batch, s.seq, s.c, s.n_head, dropout, 6, stream.get());

            std::vector<float> want(rows * c);
            std::vector<float> scratch(as_size(s.seq) * as_size(s.seq));
            cpu::attention(want.data(), scratch.data(), qkv.data(), s.batch, s.seq, s.c, s.n_head, dropout, 6);
            // Scores and probabilities stay fp32 here: only the output is rounded to T.
            check_close(d_out.to_host(stream.get()), want, attention_tolerance(dtype));
        }
    }
    const DeviceArray<T> d_big(as_size(3) * 3 * 1026, stream.get());
    CHECK_THROWS_AS(gpu::flash_attention<T>(d_big.get(), d_big.get(), 1, 3, 1026, 1, Dropout{}, 0, stream.get()),
                    std::invalid_argument);  // head dimension 1026 is above the kernel's 512
}

// ---------------------------------------------------------------------------------------------
// GEMM epilogues (gemm.hpp): cuBLASLt adds the bias, GELU or the residual before its one rounding

TEMPLATE_TEST_CASE("Gemm::linear_fused matches cpu::linear with the bias, GELU and residual after it", "[gpu]", float,
                   __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    Gemm gemm(dtype, stream.get(), /*tf32=*/false);
    struct Shape {
        int rows, in, out;
    };
    // out 25 and 77 (not multiples of 8), a single row, GPT-2 small's MLP.
    for (const Shape s : {Shape{1, 64, 25}, Shape{33, 50, 77}, Shape{128, 768, 3072}}) {
        for (const auto epilogue : {Gemm::Epilogue::bias, Gemm::Epilogue::bias_gelu, Gemm::Epilogue::bias_residual}) {
            INFO(enum_name(dtype) << " rows " << s.rows << " in " << s.in << " out " << s.out << " epilogue "
                                  << static_cast<int>(epilogue));
            const auto x = random_values(as_size(s.rows) * as_size(s.in), dtype, kSeed, 0.01f, 1.0f, Sign::either);
            const auto w = random_values(as_size(s.out) * as_size(s.in), dtype, kSeed + 1, 0.01f, 0.1f, Sign::either);
            const auto bias = random_values(as_size(s.out), dtype, kSeed + 2, 0.01f, 0.5f, Sign::either);
            auto y = random_values(as_size(s.rows) * as_size(s.out), dtype, kSeed + 3, 0.01f, 1.0f, Sign::either);

            const DeviceArray<T> d_x(x, stream.get()), d_w(w, stream.get()), d_b(bias, stream.get()), d_y(y, stream.get());
            gemm.linear_fused(d_y.get(), d_x.get(), d_w.get(), d_b.get(), s.rows, s.in, s.out, epilogue);
            const auto got = d_y.to_host(stream.get());

            std::vector<float> want(y.size());
            cpu::linear(want.data(), x.data(), w.data(), bias.data(), s.rows, s.in, s.out);
            if (epilogue == Gemm::Epilogue::bias_gelu) cpu::gelu_tanh(want.data(), static_cast<std::int64_t>(want.size()));
            if (epilogue == Gemm::Epilogue::bias_residual) cpu::residual_add(want.data(), y.data(), static_cast<std::int64_t>(want.size()));
            // One rounding of the result to T, the products summed in another order (≤ 768 terms).
            check_close(got, want, store_tolerance(dtype) + 1e-5);
        }
    }
}

TEST_CASE("gpu::attention refuses a Gemm of another dtype", "[gpu]") {
    require_gpu();
    const CudaStream stream;
    Gemm gemm(DType::fp16, stream.get(), /*tf32=*/false);
    const DeviceArray<float> qkv(3 * 8, stream.get()), scores(1, stream.get()), out(8, stream.get());
    CHECK_THROWS_AS(gpu::attention<float>(gemm, out.get(), scores.get(), qkv.get(), 1, 1, 8, 2), std::invalid_argument);
}
