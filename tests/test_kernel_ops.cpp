// The GPU kernels that are not op entries (tests/ops, checked by test_ops.cpp): the synthetic
// weights' fill, attention (gpu_attention.hpp) and cuBLASLt's epilogues, each against its CPU
// operation (cpu_ops.hpp) in fp32, fp16 and bf16. The inputs are seeded non-zero random values
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
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/gemm.hpp"
#include "kernels/compute/gpu_attention.hpp"
#include "kernels/compute/gpu_dtype.hpp"
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

// The Gemms a product of `dtype` is tested with: cuBLAS's own; for fp32 also split_tf32, with a
// scratch small enough (64 KiB) that the products run in blocks and batches in groups, and with
// the default.
std::vector<std::unique_ptr<Gemm>> test_gemms(DType dtype, cudaStream_t stream) {
    std::vector<std::unique_ptr<Gemm>> gemms;
    gemms.push_back(std::make_unique<Gemm>(dtype, stream, Fp32Gemm::exact));
    if (dtype == DType::fp32) {
        gemms.push_back(std::make_unique<Gemm>(dtype, stream, Fp32Gemm::split_tf32, std::int64_t{64} << 10));
        gemms.push_back(std::make_unique<Gemm>(dtype, stream, Fp32Gemm::split_tf32));
    }
    return gemms;
}

std::string gemm_text(const Gemm& gemm) {
    return std::string(enum_name(gemm.dtype())) + " (Gemm of " + std::to_string(gemm.workspace_bytes()) + " bytes)";
}

}  // namespace

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

// ---------------------------------------------------------------------------------------------
// Attention (gpu_attention.hpp): cuBLAS, the softmax kernel, cuBLAS

TEMPLATE_TEST_CASE("gpu::attention matches cpu::attention", "[gpu]", float, __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    struct Shape {
        int batch, seq, c, n_head;
    };
    // seq 1; head dim 25 with c 75 (odd leading dimensions 225 and 75) and batch > 1; a longer
    // sequence; head dim 130 as gpt3_13b_seed.
    for (const auto& g : test_gemms(dtype, stream.get()))
    for (const Shape s : {Shape{1, 1, 75, 3}, Shape{2, 13, 75, 3}, Shape{3, 64, 75, 3}, Shape{2, 17, 520, 4}}) {
        Gemm& gemm = *g;
        INFO(gemm_text(gemm) << " batch " << s.batch << " seq " << s.seq << " c " << s.c << " heads " << s.n_head
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

TEMPLATE_TEST_CASE("gpu::attention over grouped kv heads matches cpu::grouped_attention, softmax fused or not", "[gpu]",
                   float, __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    // 6 q heads sharing 1 (multi-query), 2 or 3 kv heads, 8 sharing 4 or 2 (groups of 2 and 4),
    // 6 sharing 6 (multi-head, through the grouped form); head dims 16, 48, 64, 80 and 128; seq 1,
    // 33 and 200 (at head dim 80); dropout 0.1 on one shape, drawn per q head as cpu's.
    struct Heads {
        int n_head, n_kv;
    };
    for (const auto& g : test_gemms(dtype, stream.get()))
    for (const Heads h : {Heads{6, 1}, Heads{6, 2}, Heads{6, 3}, Heads{8, 4}, Heads{8, 2}, Heads{6, 6}}) {
        for (const int hd : {16, 48, 64, 80, 128}) {
            for (const int seq : {1, 33, 200}) {
                if (seq == 200 && hd != 80) continue;
                for (const float p : {0.0f, 0.1f}) {
                    if (p > 0.0f && (seq != 33 || hd != 64)) continue;
                    Gemm& gemm = *g;
                    const int batch = 2;
                    const QkvHeads heads{h.n_head, h.n_kv, hd};
                    const Dropout dropout = Dropout{p, 3}.for_shape(seq, 1024);
                    const std::size_t rows = as_size(batch) * as_size(seq), c = as_size(heads.c());
                    const auto qkv = attention_inputs(rows, heads, dtype);
                    const DeviceArray<T> d_qkv(qkv, stream.get());
                    const DeviceArray<T> d_scores(as_size(batch) * as_size(h.n_head) * as_size(seq) * as_size(seq),
                                                  stream.get());
                    std::vector<float> want(rows * c);
                    std::vector<float> scratch(as_size(seq) * as_size(seq));
                    cpu::grouped_attention(want.data(), scratch.data(), qkv.data(), batch, seq, h.n_head, h.n_kv, hd,
                                           dropout, 6);
                    std::vector<float> baseline;
                    for (const bool fused : {false, true}) {
                        INFO(gemm_text(gemm) << " heads " << h.n_head << " kv heads " << h.n_kv << " head dim " << hd
                                             << " seq " << seq << " dropout " << p << (fused ? " fused" : " baseline"));
                        const DeviceArray<T> d_out(rows * c, stream.get());
                        gpu::attention<T>(gemm, d_out.get(), d_scores.get(), d_qkv.get(), batch, seq, heads,
                                          gpu::AttentionOptions{fused, dropout, 6});
                        const auto got = d_out.to_host(stream.get());
                        check_close(got, want, attention_tolerance(dtype));
                        // The fused softmax computes baseline's numbers: the same bits.
                        if (fused) CHECK(require_equal("fused against baseline", got, baseline).rel_err == 0.0);
                        else baseline = got;
                    }
                }
            }
        }
    }
    const DeviceArray<T> d_any(64, stream.get());
    Gemm gemm(dtype, stream.get(), Fp32Gemm::exact);
    CHECK_THROWS_AS(gpu::attention<T>(gemm, d_any.get(), d_any.get(), d_any.get(), 1, 1, QkvHeads{6, 4, 8}),
                    std::invalid_argument);  // 4 kv heads do not divide 6
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

TEMPLATE_TEST_CASE("gpu::flash_attention over grouped kv heads matches cpu::grouped_attention", "[gpu]", float, __half,
                   __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    // Multi-query (1 kv head) and 3 kv heads for 6 q heads; head dims 48 and 80 (LLaMA's odd
    // ones, 80 on the tensor cores), 64 and 128; 26 on the CUDA-core kernels; seq 1, 77 and 777.
    for (const int kv : {1, 3}) {
        for (const int hd : {26, 48, 64, 80, 128}) {
            for (const int seq : {1, 77, 777}) {
                const int batch = 2, n_head = 6;
                const QkvHeads heads{n_head, kv, hd};
                INFO(enum_name(dtype) << " kv heads " << kv << " head dim " << hd << " seq " << seq);
                const std::size_t rows = as_size(batch) * as_size(seq);
                const auto qkv = random_values(rows * as_size(heads.ld()), dtype, kSeed, 0.25f, 1.5f, Sign::either);
                const DeviceArray<T> d_qkv(qkv, stream.get());
                const DeviceArray<T> d_out(rows * as_size(heads.c()), stream.get());
                gpu::flash_attention<T>(d_out.get(), d_qkv.get(), batch, seq, heads, Dropout{}, 0, stream.get());

                std::vector<float> want(rows * as_size(heads.c()));
                std::vector<float> scratch(as_size(seq) * as_size(seq));
                cpu::grouped_attention(want.data(), scratch.data(), qkv.data(), batch, seq, n_head, kv, hd);
                check_close(d_out.to_host(stream.get()), want, attention_tolerance(dtype));
            }
        }
    }
    const DeviceArray<T> d_any(64, stream.get());
    CHECK_THROWS_AS(gpu::flash_attention<T>(d_any.get(), d_any.get(), 1, 1, QkvHeads{6, 4, 8}, Dropout{}, 0, stream.get()),
                    std::invalid_argument);  // 4 kv heads do not divide 6
}

TEMPLATE_TEST_CASE("gpu::flash_attention over a ragged batch attends within each sequence, packed or padded",
                   "[gpu]", float, __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    // Six sequences of lengths 1 to 777 (row blocks past a short sequence's end, partial last
    // blocks), over the kernels' head dims: 26 and 48 on the CUDA cores, 64, 80 and 128 on the
    // tensor cores, 320 on the quad kernel; kv heads 1 and 3 for 6 heads.
    const std::vector<std::int32_t> lengths = {200, 1, 777, 33, 64, 5};
    const int batch = static_cast<int>(lengths.size()), longest = 777;
    for (const int kv : {1, 3}) {
        for (const int hd : {26, 48, 64, 80, 128, 320}) {
            const QkvHeads heads{6, kv, hd};
            for (const bool packed : {true, false}) {
                INFO(enum_name(dtype) << " kv heads " << kv << " head dim " << hd << (packed ? " packed" : " padded"));
                // Packed: back to back; padded: each at a multiple of the longest, the rest padding.
                std::vector<std::int32_t> offsets(lengths.size());
                std::int32_t rows = 0;
                for (std::size_t b = 0; b < lengths.size(); ++b) {
                    offsets[b] = packed ? rows : static_cast<std::int32_t>(b) * longest;
                    rows = offsets[b] + (packed ? lengths[b] : longest);
                }
                const auto qkv = random_values(as_size(rows) * as_size(heads.ld()), dtype, kSeed + as_size(hd), 0.25f, 1.5f,
                                               Sign::either);
                const DeviceArray<T> d_qkv(qkv, stream.get());
                const DeviceArray<T> d_out(as_size(rows) * as_size(heads.c()), stream.get());
                const DeviceTokens d_offsets(offsets, stream.get()), d_lengths(lengths, stream.get());
                gpu::flash_attention<T>(d_out.get(), d_qkv.get(), batch,
                                        SequenceSpans::ragged(longest, d_offsets.get(), d_lengths.get()), heads, Dropout{},
                                        0, stream.get());
                const std::vector<float> got = d_out.to_host(stream.get());

                // Each sequence alone, on the host, against its rows; the padding is not written
                // (DeviceArray's NaN fill stays).
                std::vector<float> want(got.size(), 0.0f);
                std::vector<bool> in_span(as_size(rows), false);
                for (std::size_t b = 0; b < lengths.size(); ++b) {
                    const std::size_t first = as_size(offsets[b]), n = as_size(lengths[b]);
                    std::vector<float> scratch(n * n);
                    cpu::grouped_attention(want.data() + first * as_size(heads.c()), scratch.data(),
                                           qkv.data() + first * as_size(heads.ld()), 1, lengths[b], heads.n_head, kv, hd);
                    std::fill_n(in_span.begin() + static_cast<std::ptrdiff_t>(first), n, true);
                }
                std::vector<float> got_real, want_real;
                std::size_t padding_written = 0;
                for (std::size_t r = 0; r < as_size(rows); ++r) {
                    for (std::size_t j = 0; j < as_size(heads.c()); ++j) {
                        const std::size_t i = r * as_size(heads.c()) + j;
                        if (in_span[r]) {
                            got_real.push_back(got[i]);
                            want_real.push_back(want[i]);
                        } else if (!std::isnan(got[i])) {
                            ++padding_written;
                        }
                    }
                }
                check_close(got_real, want_real, attention_tolerance(dtype));
                CHECK(padding_written == 0);
            }
        }
    }
    const DeviceArray<T> d_any(64, stream.get());
    const DeviceTokens d_offsets(std::vector<std::int32_t>{0}, stream.get());
    CHECK_THROWS_AS(gpu::flash_attention<T>(d_any.get(), d_any.get(), 1, SequenceSpans{1, d_offsets.get(), nullptr},
                                            QkvHeads{2, 2, 8}, Dropout{}, 0, stream.get()),
                    std::invalid_argument);  // offsets without lengths
}

// ---------------------------------------------------------------------------------------------
// GEMM epilogues (gemm.hpp): cuBLASLt adds the bias, GELU or the residual before its one rounding

// The GELU's kept input and its backward are op entries (tests/ops/gemm_ops.cpp).
TEMPLATE_TEST_CASE("Gemm::linear_fused matches cpu::linear with the bias, GELU and residual after it", "[gpu]", float,
                   __half, __nv_bfloat16) {
    require_gpu();
    using T = TestType;
    constexpr DType dtype = gpu::dtype_of<T>();
    const CudaStream stream;
    struct Shape {
        int rows, in, out;
    };
    // out 25 and 77 (not multiples of 8), a single row, GPT-2 small's MLP.
    for (const auto& g : test_gemms(dtype, stream.get()))
    for (const Shape s : {Shape{1, 64, 25}, Shape{33, 50, 77}, Shape{128, 768, 3072}}) {
        Gemm& gemm = *g;
        for (const auto epilogue : {Gemm::Epilogue::bias, Gemm::Epilogue::bias_gelu, Gemm::Epilogue::bias_residual}) {
            // The residual is y's own values, or (the training step's way) a buffer apart from y.
            for (const bool apart : {false, true}) {
                if (apart && epilogue != Gemm::Epilogue::bias_residual) continue;
                INFO(gemm_text(gemm) << " rows " << s.rows << " in " << s.in << " out " << s.out << " epilogue "
                                      << static_cast<int>(epilogue) << (apart ? ", residual apart" : ""));
                const std::size_t rows = as_size(s.rows), in = as_size(s.in), out = as_size(s.out);
                const auto x = random_values(rows * in, dtype, kSeed, 0.01f, 1.0f, Sign::either);
                const auto w = random_values(out * in, dtype, kSeed + 1, 0.01f, 0.1f, Sign::either);
                const auto bias = random_values(out, dtype, kSeed + 2, 0.01f, 0.5f, Sign::either);
                const auto y = random_values(rows * out, dtype, kSeed + 3, 0.01f, 1.0f, Sign::either);
                // Apart, y starts as other values than the residual: the epilogue must read the residual.
                const auto residual = apart ? random_values(rows * out, dtype, kSeed + 4, 0.01f, 1.0f, Sign::either) : y;

                const DeviceArray<T> d_x(x, stream.get()), d_w(w, stream.get()), d_b(bias, stream.get()),
                    d_y(y, stream.get()), d_residual(residual, stream.get());
                gemm.linear_fused(d_y.get(), d_x.get(), d_w.get(), d_b.get(), s.rows, s.in, s.out, epilogue,
                                  {.residual = apart ? d_residual.get() : nullptr});

                std::vector<float> want(y.size());
                cpu::linear(want.data(), x.data(), w.data(), bias.data(), s.rows, s.in, s.out);
                if (epilogue == Gemm::Epilogue::bias_gelu) cpu::gelu_tanh(want.data(), static_cast<std::int64_t>(want.size()));
                if (epilogue == Gemm::Epilogue::bias_residual)
                    cpu::residual_add(want.data(), residual.data(), static_cast<std::int64_t>(want.size()));
                // One rounding of the result to T, the products summed in another order (≤ 768 terms).
                check_close(d_y.to_host(stream.get()), want, store_tolerance(dtype) + 1e-5);
                CHECK(d_residual.to_host(stream.get()) == residual);
            }
        }
    }
    // A width the auxiliary buffer cannot take is refused, not computed wrong.
    const DeviceArray<T> d_small(as_size(4 * 25), stream.get());
    Gemm gemm(dtype, stream.get(), Fp32Gemm::exact);
    CHECK_THROWS_AS(gemm.linear_fused(d_small.get(), d_small.get(), d_small.get(), d_small.get(), 1, 4, 25,
                                      Gemm::Epilogue::bias_gelu_aux, {.aux = d_small.get()}),
                    std::invalid_argument);
}

TEST_CASE("a Gemm holds the device memory gemm_device_bytes predicts", "[gpu]") {
    require_gpu();
    const CudaStream stream;
    for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
        for (const Fp32Gemm math : {Fp32Gemm::exact, Fp32Gemm::tf32, Fp32Gemm::split_tf32}) {
            INFO(enum_name(dtype) << " math " << static_cast<int>(math));
            CHECK(Gemm(dtype, stream.get(), math).workspace_bytes() == gemm_device_bytes(dtype, math));
        }
    }
    // The scratch a split_tf32 product needs the least: halves of a 16-wide part of 128 rows and columns.
    CHECK_THROWS_AS(Gemm(DType::fp32, stream.get(), Fp32Gemm::split_tf32, 1024), std::invalid_argument);
}

TEST_CASE("gpu::attention refuses a Gemm of another dtype", "[gpu]") {
    require_gpu();
    const CudaStream stream;
    Gemm gemm(DType::fp16, stream.get(), Fp32Gemm::exact);
    const DeviceArray<float> qkv(3 * 8, stream.get()), scores(1, stream.get()), out(8, stream.get());
    CHECK_THROWS_AS(gpu::attention<float>(gemm, out.get(), scores.get(), qkv.get(), 1, 1, 8, 2), std::invalid_argument);
}
