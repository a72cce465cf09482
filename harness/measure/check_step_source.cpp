#include "harness/measure/check_step_source.hpp"

#include <algorithm>
#include <cstring>

namespace sweetspot {

std::shared_ptr<void> HostUnitMemory::allocate(std::size_t bytes) {
    return std::shared_ptr<void>(new std::byte[bytes], [](void* p) { delete[] static_cast<std::byte*>(p); });
}

void HostUnitMemory::copy(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

void HostUnitMemory::zero(void* dst, std::size_t bytes) { std::memset(dst, 0, bytes); }

void HostUnitMemory::gather(void* host, const void* src, std::size_t element, std::int64_t count, std::int64_t stride) {
    for (std::int64_t k = 0; k < count; ++k)
        std::memcpy(static_cast<std::byte*>(host) + static_cast<std::size_t>(k) * element,
                    static_cast<const std::byte*>(src) + static_cast<std::size_t>(k * stride) * element, element);
}

void HostUnitMemory::scatter(void* dst, const void* host, std::size_t element, std::int64_t count, std::int64_t stride) {
    for (std::int64_t k = 0; k < count; ++k)
        std::memcpy(static_cast<std::byte*>(dst) + static_cast<std::size_t>(k * stride) * element,
                    static_cast<const std::byte*>(host) + static_cast<std::size_t>(k) * element, element);
}

CheckStepSource::CheckStepSource(LayerSource& backend, const WeightLayout& layout, DType dtype,
                                 const GradientSample& sample, UnitMemory& memory)
    : backend_(backend),
      layout_(layout),
      dtype_(dtype),
      sample_(sample),
      memory_(memory),
      raw_gradients_(layout.units.size()),
      before_(layout.units.size()),
      after_(layout.units.size()) {
    std::int64_t largest = 0;
    for (const UnitLayout& u : layout.units) largest = std::max(largest, u.numel);
    const auto n = static_cast<std::size_t>(largest);
    gradient_ = memory.allocate(n * dtype_size(dtype));
    weights_ = memory.allocate(n * dtype_size(dtype));
    if (dtype != DType::fp32) master_ = memory.allocate(n * sizeof(float));
    m_ = memory.allocate(n * sizeof(float));
    v_ = memory.allocate(n * sizeof(float));
}

std::vector<float> CheckStepSource::gather(const void* unit, DType dtype, int u) {
    const std::size_t element = dtype_size(dtype);
    std::vector<std::byte> raw(static_cast<std::size_t>(sample_.values(u)) * element);
    std::size_t at = 0;
    for (const SampleRun& run : sample_.units[static_cast<std::size_t>(u)]) {
        memory_.gather(raw.data() + at * element, static_cast<const std::byte*>(unit) + static_cast<std::size_t>(run.offset) * element,
                       element, run.count, run.stride);
        at += static_cast<std::size_t>(run.count);
    }
    return convert_to_f32(raw.data(), at, dtype);
}

void* CheckStepSource::gradient(int unit) {
    gradient_unit_ = unit;
    return gradient_.get();
}

void CheckStepSource::release(int unit) {
    if (gradient_unit_ == unit) {
        // The backward is done with the unit: its gradient is final (gather waits for it).
        const std::vector<float> values = gather(gradient_.get(), dtype_, unit);
        auto& raw = raw_gradients_[static_cast<std::size_t>(unit)];
        raw.resize(values.size() * dtype_size(dtype_));
        convert_from_f32(values, dtype_, raw.data());
        gradient_unit_ = -1;
    }
    backend_.release(unit);
}

std::vector<std::vector<float>> CheckStepSource::gradients() const {
    std::vector<std::vector<float>> out;
    for (const auto& raw : raw_gradients_) out.push_back(convert_to_f32(raw.data(), raw.size() / dtype_size(dtype_), dtype_));
    return out;
}

UnitUpdate CheckStepSource::acquire_update(int unit) {
    const auto u = static_cast<std::size_t>(unit);
    const auto n = static_cast<std::size_t>(layout_.units[u].numel);
    const UnitUpdate own = backend_.acquire_update(unit);
    memory_.copy(weights_.get(), own.weights, n * dtype_size(dtype_));
    if (master_) memory_.copy(master_.get(), own.master, n * sizeof(float));
    memory_.copy(m_.get(), own.m, n * sizeof(float));
    memory_.copy(v_.get(), own.v, n * sizeof(float));
    backend_.release_update(unit);

    memory_.zero(gradient_.get(), n * dtype_size(dtype_));
    const std::size_t element = dtype_size(dtype_);
    std::size_t at = 0;
    for (const SampleRun& run : sample_.units[u]) {
        memory_.scatter(static_cast<std::byte*>(gradient_.get()) + static_cast<std::size_t>(run.offset) * element,
                        raw_gradients_[u].data() + at * element, element, run.count, run.stride);
        at += static_cast<std::size_t>(run.count);
    }
    before_[u] = master_ ? gather(master_.get(), DType::fp32, unit) : gather(weights_.get(), dtype_, unit);
    return {weights_.get(), gradient_.get(), static_cast<float*>(master_.get()), static_cast<float*>(m_.get()),
            static_cast<float*>(v_.get())};
}

void CheckStepSource::release_update(int unit) {
    after_[static_cast<std::size_t>(unit)] = master_ ? gather(master_.get(), DType::fp32, unit) : gather(weights_.get(), dtype_, unit);
}

void run_host_prefix_step(const CellParams& cell, const WeightLayout& layout, const TrainSettings& settings,
                          LayerSource& backend, CheckedStep& step) {
    step.sample = prefix_sample(cell.model, layout, step.tokens);
    HostUnitMemory memory;
    CheckStepSource source(backend, layout, DType::fp32, step.sample, memory);
    CpuTrainStep prefix(cell.model, layout, step.check.shape, cell.dropout_masks(), settings);
    step.loss = prefix.forward(source, step.tokens, step.targets);
    step.grad_norm = prefix.backward(source);
    prefix.update(source);
    step.gradients = source.gradients();
    step.updated_before = source.updated_before();
    step.updated_after = source.updated_after();
}

}  // namespace sweetspot
