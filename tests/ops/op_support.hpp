#pragma once
// What the op entries (op_entry.hpp) and the [gpu] kernel tests share: seeded inputs rounded to
// the dtype, arrays in device memory, the comparison of a GPU output with its CPU operation's,
// the tolerances' building blocks, and the benchmark's timing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/gpu_dtype.hpp"
#include "kernels/compute/qkv_heads.hpp"
#include "kernels/model/dtype.hpp"
#include "op_entry.hpp"

namespace sweetspot::ops {

constexpr std::uint64_t kSeed = 20240611;
constexpr float kEps = 1e-5f;  // GPT-2's layernorm eps

// Above 256 threads × 65536 blocks the element-wise kernels' grid is capped and each thread
// strides over several elements: sizes past it test that loop.
constexpr std::int64_t kPastGridCap = std::int64_t{256} * 65536 + 75;

inline std::size_t as_size(std::int64_t n) { return static_cast<std::size_t>(n); }

// {{"rows", 13}, {"c", 75}} → dims {13, 75}, text "rows 13 c 75".
OpShape op_shape(std::initializer_list<std::pair<std::string_view, std::int64_t>> named_dims);
// The shape of an element-wise op: n elements.
inline OpShape n_shape(std::int64_t n) { return op_shape({{"n", n}}); }

// A memory-bound op's cost: no model flops, `elements` values of `dtype` read or written at the least.
OpCost memory_cost(double elements, DType dtype);

// ---- tolerances -----------------------------------------------------------------------------

// Unit roundoff u of a dtype: the largest relative error of one round-to-nearest store,
// 2^-p for p significand bits (fp32 24, fp16 11, bf16 8).
double unit_roundoff(DType dtype);

// Element-wise and row-wise kernels. Both sides read identical inputs and compute in fp32; the
// kernel then rounds its result once, to T, when it stores it. So each output is within
// u·|cpu| ≤ u·max|cpu| of the CPU's, i.e. max|gpu − cpu| / max|cpu| ≤ u, plus what fp32 itself
// differs by (device expf/tanhf are within 2 ulp of glibc's; the layernorm and softmax sums run
// in another order): ~1e-7 at these sizes, 1e-5 allowed. Twice u leaves room for the fp32 part
// adding to a full rounding. fp32 1.0e-5, fp16 1.0e-3, bf16 7.8e-3; an indexing, masking or
// formula error is far above them.
double store_tolerance(DType dtype);

// Attention rounds to T three times where the CPU keeps fp32: the scores, the probabilities and
// the output. The output and probability roundings add up to 2u relative to max|v| ≥ max|out|.
// A score s stored with error ≤ u·|s| moves its weight exp(s − max) by up to u·(|s| + |max|),
// ≲ 10u with the scores these inputs give (|s| ≲ 5), but those errors have random signs and
// average out in the weighted mean Σ p·v. 4u, fp16 2.0e-3 and bf16 1.6e-2, keeps a 3× margin
// over what an H100 gives and still fails a mask leak, a wrong head offset, or a scale off by 1 %
// (fp16; moves these outputs by 7e-3) or 5 % (bf16; 3e-2). fp32 takes the fp32 part (cuBLAS and
// OpenBLAS sum in other orders over ≤ 130 terms): 1e-5.
double attention_tolerance(DType dtype);

// ---- comparison -----------------------------------------------------------------------------

// max |gpu − cpu| / max |cpu| of one output named `output`, the measure the GPU forward's logits
// are judged by. An element the kernel never wrote keeps its NaN fill (DeviceArray) and counts as
// non-finite; an all-zero reference judges nothing and gives an infinite error.
OpError compare(std::string_view output, const std::vector<float>& gpu, const std::vector<float>& cpu);

// For outputs that must be identical (a fusion against the kernels it replaces, masked entries
// against their exact zeros): error 0 when `a` and `b` are equal bit for bit as floats, infinite
// otherwise, naming `what`.
OpError require_equal(std::string_view what, const std::vector<float>& a, const std::vector<float>& b);

// ---- inputs ---------------------------------------------------------------------------------

enum class Sign { positive, either };

// n values with magnitudes uniform in [lo, hi] (0 < lo) and, for Sign::either, random signs,
// rounded to `dtype` so that the CPU computes from exactly what the GPU holds. No value is zero:
// a kernel that reads the wrong element or none cannot match by accident on zeros.
std::vector<float> random_values(std::size_t n, DType dtype, std::uint64_t seed, float lo, float hi, Sign sign);

// n token ids uniform in [0, vocab).
std::vector<std::int32_t> random_tokens(std::size_t n, int vocab, std::uint64_t seed);

// qkv [rows, 3c] for the attention tests. |q|, |k| in [0.25, 1.5] make scores of a few units
// (|s| ≲ 5): softmax rows neither flat nor one-hot. v is smaller, as after a layernorm and a
// projection.
std::vector<float> attention_inputs(std::size_t rows, std::size_t c, DType dtype);
// The same over a packed qkv of grouped heads, [rows, heads.ld()] (qkv_heads.hpp), v the smaller.
std::vector<float> attention_inputs(std::size_t rows, QkvHeads heads, DType dtype);

// ---- device memory --------------------------------------------------------------------------

// n elements of T in device memory, freed through DeviceMemory (cudaFree waits for the device).
// Uploads and downloads go through `stream` and synchronize it, so the kernels enqueued on the
// same stream are ordered between them.
template <class T>
class DeviceArray {
public:
    // Holds `values`, which are representable in T (random_values), so the upload is exact.
    DeviceArray(std::span<const float> values, cudaStream_t stream)
        : n_(values.size()), memory_(allocate_device(static_cast<std::int64_t>(n_ * sizeof(T)))) {
        upload(values, stream);
    }

    // Filled with 0xFF bytes, a NaN in all three types: an output element no kernel writes
    // comes back as NaN.
    DeviceArray(std::size_t n, cudaStream_t stream)
        : n_(n), memory_(allocate_device(static_cast<std::int64_t>(n_ * sizeof(T)))) {
        CUDA_CHECK(cudaMemsetAsync(get(), 0xFF, n_ * sizeof(T), stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }

    T* get() const { return reinterpret_cast<T*>(memory_.get()); }
    std::size_t size() const { return n_; }

    // Overwrites the array with `values` (as many as it holds).
    void upload(std::span<const float> values, cudaStream_t stream) const {
        if (values.size() != n_) throw std::logic_error("DeviceArray::upload: size differs from the array's");
        std::vector<std::byte> bytes(n_ * sizeof(T));
        convert_from_f32(values, gpu::dtype_of<T>(), bytes.data());
        CUDA_CHECK(cudaMemcpyAsync(get(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
    }

    // The values widened to fp32 (exact), after everything enqueued on `stream` before.
    std::vector<float> to_host(cudaStream_t stream) const {
        std::vector<T> raw(n_);
        CUDA_CHECK(cudaMemcpyAsync(raw.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        std::vector<float> out(n_);
        for (std::size_t i = 0; i < n_; ++i) {
            if constexpr (std::is_same_v<T, float>) {
                out[i] = raw[i];
            } else {
                std::uint16_t bits;
                std::memcpy(&bits, &raw[i], sizeof bits);
                out[i] = std::is_same_v<T, __half> ? fp16_bits_to_float(bits) : bf16_bits_to_float(bits);
            }
        }
        return out;
    }

private:
    std::size_t n_;
    DeviceMemory memory_;
};

// Token ids in device memory.
class DeviceTokens {
public:
    DeviceTokens(const std::vector<std::int32_t>& tokens, cudaStream_t stream);
    const std::int32_t* get() const { return reinterpret_cast<const std::int32_t*>(memory_.get()); }

private:
    DeviceMemory memory_;
};

// The entry's case for `dtype`: Case<float>, Case<__half> or Case<__nv_bfloat16> made from `args`.
template <template <class> class Case, class... Args>
std::unique_ptr<OpCase> make_case(DType dtype, Args&&... args) {
    switch (dtype) {
        case DType::fp32: return std::make_unique<Case<float>>(std::forward<Args>(args)...);
        case DType::fp16: return std::make_unique<Case<__half>>(std::forward<Args>(args)...);
        case DType::bf16: return std::make_unique<Case<__nv_bfloat16>>(std::forward<Args>(args)...);
    }
    throw std::logic_error("make_case: unknown dtype");
}

// ---- timing ---------------------------------------------------------------------------------

// Milliseconds of 20 runs of `run` after 3 warm-ups, in order, each timed with CUDA events on
// `stream` (the work `run` enqueues there).
std::vector<double> timed_ms(cudaStream_t stream, const std::function<void()>& run);
// Their median.
double median_ms(cudaStream_t stream, const std::function<void()>& run);

}  // namespace sweetspot::ops
