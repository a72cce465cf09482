// A linear layer's products through Gemm (kernels/compute/gemm.hpp): the forward y = x · wᵀ, the
// backward's dw = dyᵀ · x and dx = dy · w, and the training step's two epilogues with an
// auxiliary buffer (the GELU's kept input forward, its derivative backward). Their benchmark rows
// say what cuBLAS gives at the models' shapes in each dtype: the ceiling of a training step made
// mostly of these products. The split_tf32 entries are the same products in fp32 as three TF32
// products of split operands, at shapes that also run them in blocks of a small scratch.
#include <utility>
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/gemm.hpp"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

enum class Product { forward, weight_grad, input_grad, gelu_aux, dgelu };

// dims: rows, in, out of the layer y [rows, out] = x [rows, in] · wᵀ, w [out, in]; for
// split_tf32, a fourth: the split scratch in KiB (0: the default).
template <class T>
class GemmCase final : public OpCase {
public:
    GemmCase(Product product, Fp32Gemm math, const OpShape& shape, cudaStream_t stream)
        : product_(product),
          rows_(static_cast<int>(shape.dims[0])),
          in_(static_cast<int>(shape.dims[1])),
          out_(static_cast<int>(shape.dims[2])),
          gemm_(dtype, stream, math,
                shape.dims.size() > 3 && shape.dims[3] > 0 ? shape.dims[3] << 10 : kSplitTf32ScratchBytes),
          x_(input(uses_x(), size(rows_, in_), kSeed, 1.0f)),
          w_(input(product != Product::weight_grad, size(out_, in_), kSeed + 1, 0.1f)),
          bias_(input(product == Product::gelu_aux, as_size(out_), kSeed + 2, 0.5f)),
          dy_(input(uses_dy(), size(rows_, out_), kSeed + 3, 1.0f)),
          // The dgelu's kept pre-activation spans GELU's curved part and both tails.
          pre_(input(product == Product::dgelu, size(rows_, in_), kSeed + 4, 3.0f)),
          d_x_(x_, stream),
          d_w_(w_, stream),
          d_bias_(bias_, stream),
          d_dy_(dy_, stream),
          d_pre_(pre_, stream),
          d_y_(output(product == Product::forward || product == Product::gelu_aux, size(rows_, out_)), stream),
          d_aux_(output(product == Product::gelu_aux, size(rows_, out_)), stream),
          d_dw_(output(product == Product::weight_grad, size(out_, in_)), stream),
          d_dx_(output(product == Product::input_grad || product == Product::dgelu, size(rows_, in_)), stream) {}

    void run(cudaStream_t) override {
        switch (product_) {
            case Product::forward: gemm_.linear(d_y_.get(), d_x_.get(), d_w_.get(), rows_, in_, out_); break;
            case Product::weight_grad:
                // dw [out, in] = dyᵀ [out, rows] · x [rows, in].
                gemm_.batched(/*trans_a=*/true, /*trans_b=*/false, out_, in_, rows_, 1.0f, d_dy_.get(), out_, 0,
                              d_x_.get(), in_, 0, 0.0f, d_dw_.get(), in_, 0, 1);
                break;
            case Product::input_grad:
                // dx [rows, in] = dy [rows, out] · w [out, in].
                gemm_.batched(/*trans_a=*/false, /*trans_b=*/false, rows_, in_, out_, 1.0f, d_dy_.get(), out_, 0,
                              d_w_.get(), in_, 0, 0.0f, d_dx_.get(), in_, 0, 1);
                break;
            case Product::gelu_aux:
                gemm_.linear_fused(d_y_.get(), d_x_.get(), d_w_.get(), d_bias_.get(), rows_, in_, out_,
                                   Gemm::Epilogue::bias_gelu_aux, {.aux = d_aux_.get()});
                break;
            case Product::dgelu:
                gemm_.linear_backward_dgelu(d_dx_.get(), d_dy_.get(), d_w_.get(), d_pre_.get(), rows_, in_, out_);
                break;
        }
    }

    OpError check(cudaStream_t stream) override {
        std::vector<float> y(size(rows_, out_)), dx(size(rows_, in_)), dw(size(out_, in_), 0.0f);
        switch (product_) {
            case Product::forward:
                cpu::linear(y.data(), x_.data(), w_.data(), nullptr, rows_, in_, out_);
                return compare("y", d_y_.to_host(stream), y);
            case Product::weight_grad:
            case Product::input_grad:
            case Product::dgelu: {
                cpu::linear_backward(dx.data(), dw.data(), nullptr, dy_.data(), x_.data(), w_.data(), rows_, in_, out_);
                if (product_ == Product::weight_grad) return compare("dw", d_dw_.to_host(stream), dw);
                if (product_ == Product::dgelu) cpu::gelu_tanh_backward(dx.data(), pre_.data(), std::ssize(dx));
                return compare("dx", d_dx_.to_host(stream), dx);
            }
            case Product::gelu_aux: {
                cpu::linear(y.data(), x_.data(), w_.data(), bias_.data(), rows_, in_, out_);
                OpError error = compare("aux", d_aux_.to_host(stream), y);
                cpu::gelu_tanh(y.data(), std::ssize(y));
                error.include(compare("y", d_y_.to_host(stream), y));
                return error;
            }
        }
        return {};
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    static std::size_t size(int a, int b) { return as_size(a) * as_size(b); }
    bool uses_x() const { return product_ == Product::forward || product_ == Product::weight_grad || product_ == Product::gelu_aux; }
    bool uses_dy() const { return !(product_ == Product::forward || product_ == Product::gelu_aux); }
    // Only the product's own operands are made at full size (the lm_head's are gigabytes); the
    // others hold one value.
    static std::vector<float> input(bool used, std::size_t n, std::uint64_t seed, float hi) {
        return random_values(used ? n : 1, dtype, seed, 0.01f, hi, Sign::either);
    }
    static std::size_t output(bool used, std::size_t n) { return used ? n : 1; }
    Product product_;
    int rows_, in_, out_;
    Gemm gemm_;
    std::vector<float> x_, w_, bias_, dy_, pre_;
    DeviceArray<T> d_x_, d_w_, d_bias_, d_dy_, d_pre_, d_y_, d_aux_, d_dw_, d_dx_;
};

OpShape layer(std::int64_t rows, std::int64_t in, std::int64_t out) {
    return op_shape({{"rows", rows}, {"in", in}, {"out", out}});
}

// A layer of a split_tf32 entry, with its scratch in KiB (0: the default).
OpShape split_layer(const OpShape& s, std::int64_t scratch_kib) {
    return op_shape({{"rows", s.dims[0]}, {"in", s.dims[1]}, {"out", s.dims[2]}, {"scratch_kib", scratch_kib}});
}
std::vector<OpShape> split_layers(const std::vector<OpShape>& shapes, std::int64_t scratch_kib) {
    std::vector<OpShape> out;
    for (const OpShape& s : shapes) out.push_back(split_layer(s, scratch_kib));
    return out;
}

// GPT-2 1.5B's four products at batch 8, seq 1024: qkv, the attention's projection, the MLP's two.
std::vector<OpShape> block_layers() {
    constexpr std::int64_t rows = 8 * 1024, c = 1600;
    return {layer(rows, c, 3 * c), layer(rows, c, c), layer(rows, c, 4 * c), layer(rows, 4 * c, c)};
}

// One output element is a sum of `in` (forward) or `out` or `rows` products, rounded once to T.
// fp32's sums run in other orders on the two sides: over the ≤ 768 terms of random sign of the
// test shapes their difference stays ≲ 1e-6 of the largest output, well within 1e-5.
double gemm_tolerance(DType dtype) { return store_tolerance(dtype) + 1e-5; }

OpEntry gemm_entry(std::string name, Product product, std::vector<OpShape> test_shapes,
                   std::vector<OpShape> bench_shapes, Fp32Gemm math = Fp32Gemm::exact) {
    return OpEntry{
        .name = std::move(name),
        .family = "gemm",
        .test_shapes = std::move(test_shapes),
        .bench_shapes = std::move(bench_shapes),
        .tolerance = gemm_tolerance,
        .cost = [](const OpShape& s, DType dtype) {
            const double rows = static_cast<double>(s.dims[0]), in = static_cast<double>(s.dims[1]),
                         out = static_cast<double>(s.dims[2]);
            // The three matrices once each, at the least.
            return OpCost{.flops = 2.0 * rows * in * out,
                          .bytes = (rows * in + in * out + rows * out) * static_cast<double>(dtype_size(dtype))};
        },
        .make = [product, math](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<GemmCase>(dtype, product, math, s, stream);
        },
    };
}

// The entry's product in fp32 as split_tf32: its test shapes with a 64 KiB scratch (16 Ki floats
// of halves: every shape but the smallest runs in blocks of 128 rows or columns and 32 of k) and
// the largest once more with the default; its bench shapes with the default.
OpEntry split_tf32_entry(const OpEntry& exact, Product product) {
    std::vector<OpShape> test_shapes = split_layers(exact.test_shapes, 64);
    test_shapes.push_back(split_layer(exact.test_shapes.back(), 0));
    // More rows than a block holds, the last block partial.
    test_shapes.push_back(split_layer(layer(1000, 64, 64), 64));
    OpEntry e = gemm_entry(exact.name + "_split_tf32", product, std::move(test_shapes),
                           split_layers(exact.bench_shapes, 0), Fp32Gemm::split_tf32);
    e.dtypes = {DType::fp32};
    return e;
}

}  // namespace

std::vector<OpEntry> gemm_ops() {
    // A single row; widths that are no multiple of 8 (cuBLAS's unaligned kernels); GPT-2 small's MLP.
    const std::vector<OpShape> odd = {layer(1, 64, 25), layer(33, 50, 77), layer(128, 768, 3072)};
    // The epilogues with an auxiliary buffer take widths that are multiples of 8 (gemm_limits.hpp).
    const std::vector<OpShape> aligned = {layer(1, 64, 24), layer(33, 56, 80), layer(128, 768, 3072)};
    std::vector<OpShape> forward_bench = block_layers();
    // The lm_head over GPT-2's vocabulary, and over its part below the last multiple of 128: the
    // training step computes that part apart, so cuBLAS takes its aligned kernels.
    forward_bench.push_back(layer(8 * 1024, 1600, 50257));
    forward_bench.push_back(layer(8 * 1024, 1600, 50176));
    const std::pair<OpEntry, Product> exact[] = {
        {gemm_entry("linear", Product::forward, odd, forward_bench), Product::forward},
        {gemm_entry("linear_weight_grad", Product::weight_grad, odd, block_layers()), Product::weight_grad},
        {gemm_entry("linear_input_grad", Product::input_grad, odd, block_layers()), Product::input_grad},
        {gemm_entry("linear_bias_gelu_aux", Product::gelu_aux, aligned, {layer(8 * 1024, 1600, 4 * 1600)}),
         Product::gelu_aux},
        // The backward through the MLP's second product: in = 4c is the GELU's width.
        {gemm_entry("linear_dgelu", Product::dgelu, {layer(1, 24, 64), layer(33, 80, 56), layer(128, 3072, 768)},
                    {layer(8 * 1024, 4 * 1600, 1600)}),
         Product::dgelu},
    };
    std::vector<OpEntry> entries;
    for (const auto& [entry, product] : exact) entries.push_back(entry);
    for (const auto& [entry, product] : exact) entries.push_back(split_tf32_entry(entry, product));
    return entries;
}

}  // namespace sweetspot::ops
