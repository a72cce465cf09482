#include "kernels/compute/host_adamw.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "base/parallel_for.hpp"

namespace sweetspot {

namespace {

// The dtype's bits of a float and back: bf16's conversions are inline and branch-free
// (dtype.hpp), so its loop vectorises; fp16's are a call per element, which keeps its loop scalar.
struct Bf16 {
    static float widen(std::uint16_t b) { return bf16_bits_to_float(b); }
    static std::uint16_t narrow(float f) { return float_to_bf16_bits(f); }
};
struct Fp16 {
    static float widen(std::uint16_t h) { return fp16_bits_to_float(h); }
    static std::uint16_t narrow(float f) { return float_to_fp16_bits(f); }
};
struct Fp32 {
    static float widen(float f) { return f; }
    static float narrow(float f) { return f; }
};

// gpu::adamw_kernel's arithmetic over [begin, end); kMaster: the fp32 master is apart from the
// weights (a template parameter, not a test per element, so the loop has no branch). Built three
// times, the loader picking the widest the cores have: where the cores rather than the memory set
// the update's rate, the division, square root and division per element held SSE's four lanes
// below the rate its streams move at, and AVX-512's byte and word instructions (x86-64-v4) convert
// bf16 in fewer steps than AVX2's. Without contraction (CMakeLists.txt) each build rounds every
// operation as SSE does, so all three give the same bits.
template <class Convert, bool kMaster, class T>
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
void adamw_range(T* weights, float* master, const T* gradient, float* m, float* v, std::int64_t begin,
                 std::int64_t end, const cpu::AdamW& a, float correct1, float correct2) {
    for (std::int64_t i = begin; i < end; ++i) {
        const float g = Convert::widen(gradient[i]) * a.grad_scale;
        const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
        const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
        float p = kMaster ? master[i] : Convert::widen(weights[i]);
        p -= a.lr * a.weight_decay * p;
        p -= a.lr * (mi / correct1) / (std::sqrt(vi / correct2) + a.eps);
        m[i] = mi;
        v[i] = vi;
        if constexpr (kMaster) master[i] = p;
        weights[i] = Convert::narrow(p);
    }
}

template <class Convert, class T>
void adamw_tensors(void* weights, float* master, const void* gradient, float* m, float* v,
                   std::span<const HostAdamwTensor> tensors) {
    std::vector<std::int64_t> first(tensors.size() + 1, 0);  // where each tensor starts in the pass
    for (std::size_t t = 0; t < tensors.size(); ++t) first[t + 1] = first[t] + tensors[t].numel;
    parallel_for(first.back(), [&](std::int64_t begin, std::int64_t end) {
        auto t = static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), begin) - first.begin()) - 1;
        for (; begin < end; begin = first[++t]) {
            const HostAdamwTensor& tensor = tensors[t];
            const std::int64_t at = tensor.offset, from = begin - first[t], to = std::min(end, first[t + 1]) - first[t];
            auto* w = static_cast<T*>(weights) + at;
            const auto* g = static_cast<const T*>(gradient) + at;
            const float correct1 = tensor.a.bias_correction1(), correct2 = tensor.a.bias_correction2();
            if (master != nullptr)
                adamw_range<Convert, true>(w, master + at, g, m + at, v + at, from, to, tensor.a, correct1, correct2);
            else
                adamw_range<Convert, false>(w, master, g, m + at, v + at, from, to, tensor.a, correct1, correct2);
        }
    });
}

}  // namespace

void host_adamw(DType dtype, void* weights, float* master, const void* gradient, float* m, float* v,
                std::span<const HostAdamwTensor> tensors) {
    if (dtype != DType::fp32 && master == nullptr)
        throw std::invalid_argument("host_adamw: below fp32 the update needs the fp32 master weights");
    switch (dtype) {
        case DType::fp32: adamw_tensors<Fp32, float>(weights, master, gradient, m, v, tensors); return;
        case DType::fp16: adamw_tensors<Fp16, std::uint16_t>(weights, master, gradient, m, v, tensors); return;
        case DType::bf16: adamw_tensors<Bf16, std::uint16_t>(weights, master, gradient, m, v, tensors); return;
    }
}

void host_adamw(DType dtype, void* weights, float* master, const void* gradient, float* m, float* v, std::int64_t n,
                const cpu::AdamW& a) {
    const HostAdamwTensor tensor{0, n, a};
    host_adamw(dtype, weights, master, gradient, m, v, std::span(&tensor, 1));
}

}  // namespace sweetspot
