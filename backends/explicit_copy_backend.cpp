#include "backends/explicit_copy_backend.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

namespace sweetspot {
namespace {

// cudaMalloc's alignment; every unit and slot starts on it (units are multiples of 256 bytes in
// every dtype, so this costs nothing).
constexpr std::int64_t kUnitAlignment = 256;

}  // namespace

ExplicitCopyBackend::ExplicitCopyBackend(const BackendConfig& config) : config_(config) {
    copy_streams_.reserve(static_cast<std::size_t>(config.streams));
    for (int i = 0; i < config.streams; ++i) copy_streams_.emplace_back();
}

void ExplicitCopyBackend::place(const WeightLayout& layout, const UnitFiller& fill) {
    unit_bytes_ = unit_bytes(layout, config_.dtype);
    plan_ = plan_residency(unit_bytes_, config_.budget_bytes, streaming_slots(config_.prefetch_depth), config_.resident);

    host_packed_ = pack_units(unit_bytes_, kUnitAlignment);
    host_weights_ = allocate_pinned(host_packed_.total_bytes);
    std::byte* host = host_weights_.get();
    fill_units(layout, config_.dtype, fill, [&](int unit, const void* data, std::size_t bytes) {
        std::memcpy(host + host_packed_.offsets[static_cast<std::size_t>(unit)], data, bytes);
    });

    // Device layout: the resident units packed from the start, then the slots.
    const auto n_units = unit_bytes_.size();
    device_offset_.assign(n_units, -1);
    seq_of_unit_.assign(n_units, -1);
    streamed_.clear();
    std::int64_t offset = 0;
    for (std::size_t u = 0; u < n_units; ++u) {
        if (plan_.resident[u]) {
            device_offset_[u] = offset;
            offset += round_up_bytes(unit_bytes_[u], kUnitAlignment);
        } else {
            seq_of_unit_[u] = static_cast<int>(streamed_.size());
            streamed_.push_back(static_cast<int>(u));
        }
    }
    slots_offset_ = offset;
    slot_stride_ = round_up_bytes(plan_.slot_bytes, kUnitAlignment);
    device_bytes_ = slots_offset_ + plan_.slots * slot_stride_;
    device_weights_ = allocate_device(device_bytes_);

    for (std::size_t u = 0; u < n_units; ++u) {
        if (!plan_.resident[u]) continue;
        CUDA_CHECK(cudaMemcpy(device_weights_.get() + device_offset_[u], host + host_packed_.offsets[u],
                              static_cast<std::size_t>(unit_bytes_[u]), cudaMemcpyHostToDevice));
    }
    slot_free_.clear();
    copy_done_.clear();
    for (int s = 0; s < plan_.slots; ++s) {
        slot_free_.emplace_back();
        copy_done_.emplace_back();
    }
    // place() is outside the timed region: leave nothing in flight.
    CUDA_CHECK(cudaDeviceSynchronize());
    issued_ = acquired_ = released_ = 0;
}

void ExplicitCopyBackend::reset_residency() {
    // Copies of an aborted forward may still be running into the slots; the next forward starts
    // with empty slots and must not overlap the previous one (this is outside the timed region).
    CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
    for (const auto& s : copy_streams_) CUDA_CHECK(cudaStreamSynchronize(s.get()));
    issued_ = acquired_ = released_ = 0;
}

cudaStream_t ExplicitCopyBackend::copy_stream(int seq) const {
    if (copy_streams_.empty()) return compute_stream();  // streams = 0: copies serialize with compute
    return copy_streams_[static_cast<std::size_t>(seq) % copy_streams_.size()].get();
}

std::byte* ExplicitCopyBackend::slot_pointer(int slot) const {
    return device_weights_.get() + slots_offset_ + slot * slot_stride_;
}

void ExplicitCopyBackend::check_unit(int unit) const {
    if (unit < 0 || unit >= static_cast<int>(unit_bytes_.size()))
        throw std::out_of_range("explicit-copy backend: no unit " + std::to_string(unit));
}

// Copies the next streamed unit (sequence number issued_) into its slot. Its slot was last used
// by sequence issued_ - S, which the caller checked was released: the copy stream waits on the
// event recorded at that release, so the unit's kernels are done before the slot is overwritten.
void ExplicitCopyBackend::issue_next_copy() {
    const int seq = issued_;
    const int slot = seq % slots();
    const auto unit = static_cast<std::size_t>(streamed_[static_cast<std::size_t>(seq)]);
    const cudaStream_t stream = copy_stream(seq);
    slot_free_[static_cast<std::size_t>(slot)].wait_on(stream);
    CUDA_CHECK(cudaMemcpyAsync(slot_pointer(slot), host_weights_.get() + host_packed_.offsets[unit],
                               static_cast<std::size_t>(unit_bytes_[unit]), cudaMemcpyHostToDevice, stream));
    copy_done_[static_cast<std::size_t>(slot)].record(stream);
    ++issued_;
}

// Look-ahead: issue every copy whose slot is free, i.e. whose sequence number is below
// released_ + S. While unit `released_` is computed that keeps S - 1 = n copies ahead of it.
void ExplicitCopyBackend::issue_ready_copies() {
    const int n_streamed = static_cast<int>(streamed_.size());
    while (issued_ < n_streamed && issued_ < released_ + slots()) issue_next_copy();
}

const void* ExplicitCopyBackend::acquire(int unit) {
    check_unit(unit);
    const bool look_ahead = config_.prefetch_depth >= 1;
    const auto u = static_cast<std::size_t>(unit);
    if (plan_.resident[u]) {
        // The first acquire of a forward (unit 0) starts the pipeline even when unit 0 is resident.
        if (look_ahead) issue_ready_copies();
        return device_weights_.get() + device_offset_[u];
    }
    const int seq = seq_of_unit_[u];
    if (seq != acquired_) {
        throw std::logic_error("explicit-copy backend: unit " + std::to_string(unit) +
                               " acquired out of forward order; streamed units are acquired once each, in order, "
                               "and reset_residency() starts every forward");
    }
    if (look_ahead) issue_ready_copies();
    if (issued_ == seq) {  // jit / off: copy it now, or look-ahead could not start it
        if (seq >= released_ + slots()) {
            throw std::logic_error("explicit-copy backend: unit " + std::to_string(unit) + " acquired while all " +
                                   std::to_string(slots()) + " slots hold units not yet released");
        }
        issue_next_copy();
    }
    const int slot = seq % slots();
    copy_done_[static_cast<std::size_t>(slot)].wait_on(compute_stream());
    ++acquired_;
    return slot_pointer(slot);
}

void ExplicitCopyBackend::release(int unit) {
    check_unit(unit);
    const int seq = seq_of_unit_[static_cast<std::size_t>(unit)];
    if (seq < 0) return;  // resident: stays on the device
    if (seq != released_ || seq >= acquired_) {
        throw std::logic_error("explicit-copy backend: unit " + std::to_string(unit) +
                               " released out of forward order or without being acquired");
    }
    // The unit's kernels are enqueued, not finished: the next copy into this slot waits for them.
    slot_free_[static_cast<std::size_t>(seq % slots())].record(compute_stream());
    ++released_;
    if (config_.prefetch_depth >= 1) issue_ready_copies();
}

PlacementStats ExplicitCopyBackend::placement() const {
    PlacementStats s;
    s.resident_bytes = plan_.resident_bytes;
    s.streamed_bytes = plan_.streamed_bytes;
    s.device_weight_bytes = device_bytes_;
    s.resident_units = plan_.resident_units();
    s.streamed_units = plan_.streamed_units();
    s.slots = plan_.slots;
    return s;
}

}  // namespace sweetspot
