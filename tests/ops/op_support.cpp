#include "op_support.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

namespace sweetspot::ops {

void OpError::include(const OpError& other) {
    nonfinite += other.nonfinite;
    if (worst.empty() || other.rel_err > rel_err) {
        rel_err = other.rel_err;
        worst = other.worst;
    }
}

OpShape op_shape(std::initializer_list<std::pair<std::string_view, std::int64_t>> named_dims) {
    OpShape shape;
    for (const auto& [name, value] : named_dims) {
        shape.dims.push_back(value);
        shape.text += (shape.text.empty() ? "" : " ") + std::string(name) + " " + std::to_string(value);
    }
    return shape;
}

OpCost memory_cost(double elements, DType dtype) {
    return OpCost{0.0, elements * static_cast<double>(dtype_size(dtype))};
}

double unit_roundoff(DType dtype) {
    switch (dtype) {
        case DType::fp32: return std::ldexp(1.0, -24);
        case DType::fp16: return std::ldexp(1.0, -11);
        case DType::bf16: return std::ldexp(1.0, -8);
    }
    return 1.0;
}

double store_tolerance(DType dtype) { return 2.0 * unit_roundoff(dtype) + 1e-5; }

double attention_tolerance(DType dtype) { return dtype == DType::fp32 ? 1e-5 : 4.0 * unit_roundoff(dtype); }

OpError compare(std::string_view output, const std::vector<float>& gpu, const std::vector<float>& cpu) {
    if (gpu.size() != cpu.size()) throw std::logic_error("compare: " + std::string(output) + " sizes differ");
    double max_err = 0.0, max_ref = 0.0;
    OpError error;
    for (std::size_t i = 0; i < gpu.size(); ++i) {
        if (!std::isfinite(gpu[i])) {
            ++error.nonfinite;
            continue;
        }
        max_err = std::max(max_err, std::abs(static_cast<double>(gpu[i]) - static_cast<double>(cpu[i])));
        max_ref = std::max(max_ref, std::abs(static_cast<double>(cpu[i])));
    }
    error.rel_err = max_ref > 0.0 ? max_err / max_ref : std::numeric_limits<double>::infinity();
    std::ostringstream text;
    text << output << ": max |gpu - cpu| " << max_err << ", max |cpu| " << max_ref << ", " << error.nonfinite
         << " non-finite of " << gpu.size();
    error.worst = text.str();
    return error;
}

OpError require_equal(std::string_view what, const std::vector<float>& a, const std::vector<float>& b) {
    OpError error;
    const bool equal = a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
                           return std::memcmp(&x, &y, sizeof x) == 0;
                       });
    error.rel_err = equal ? 0.0 : std::numeric_limits<double>::infinity();
    error.worst = std::string(what) + (equal ? ": identical" : ": NOT identical");
    return error;
}

std::vector<float> random_values(std::size_t n, DType dtype, std::uint64_t seed, float lo, float hi, Sign sign) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> magnitude(lo, hi);
    std::bernoulli_distribution negative(0.5);
    std::vector<float> values(n);
    for (float& v : values) {
        v = magnitude(gen);
        if (sign == Sign::either && negative(gen)) v = -v;
    }
    round_through_dtype(values, dtype);
    return values;
}

std::vector<std::int32_t> random_tokens(std::size_t n, int vocab, std::uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::uniform_int_distribution<std::int32_t> token(0, vocab - 1);
    std::vector<std::int32_t> tokens(n);
    for (auto& t : tokens) t = token(gen);
    return tokens;
}

std::vector<float> attention_inputs(std::size_t rows, QkvHeads heads, DType dtype) {
    const auto ld = static_cast<std::size_t>(heads.ld()), v_col = static_cast<std::size_t>(heads.v_col(0));
    const std::size_t v_width = ld - v_col;
    auto qkv = random_values(rows * ld, dtype, kSeed, 0.25f, 1.5f, Sign::either);
    const auto v = random_values(rows * v_width, dtype, kSeed + 1, 0.01f, 1.0f, Sign::either);
    for (std::size_t r = 0; r < rows; ++r) {
        std::copy_n(v.begin() + static_cast<std::ptrdiff_t>(r * v_width), v_width,
                    qkv.begin() + static_cast<std::ptrdiff_t>(r * ld + v_col));
    }
    return qkv;
}

std::vector<float> attention_inputs(std::size_t rows, std::size_t c, DType dtype) {
    return attention_inputs(rows, QkvHeads{1, 1, static_cast<int>(c)}, dtype);
}

DeviceTokens::DeviceTokens(const std::vector<std::int32_t>& tokens, cudaStream_t stream)
    : memory_(allocate_device(static_cast<std::int64_t>(tokens.size() * sizeof(std::int32_t)))) {
    CUDA_CHECK(cudaMemcpyAsync(memory_.get(), tokens.data(), tokens.size() * sizeof(std::int32_t),
                               cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
}

std::vector<double> timed_ms(cudaStream_t stream, const std::function<void()>& run) {
    const CudaEvent start(CudaEvent::Timing::on), stop(CudaEvent::Timing::on);
    for (int i = 0; i < 3; ++i) run();
    std::vector<double> ms;
    for (int i = 0; i < 20; ++i) {
        start.record(stream);
        run();
        stop.record(stream);
        stop.synchronize();
        ms.push_back(stop.ms_since(start));
    }
    return ms;
}

double median_ms(cudaStream_t stream, const std::function<void()>& run) {
    std::vector<double> ms = timed_ms(stream, run);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

}  // namespace sweetspot::ops
