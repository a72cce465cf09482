#include "backends/uvm_prefetch_backend.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

#include "backends/residency_plan.hpp"

namespace sweetspot {

UvmPrefetchBackend::UvmPrefetchBackend(const BackendConfig& config) : config_(config) {
    prefetch_streams_.reserve(static_cast<std::size_t>(config.streams));
    for (int i = 0; i < config.streams; ++i) prefetch_streams_.emplace_back();
}

void UvmPrefetchBackend::place(const WeightLayout& layout, const UnitFiller& fill) {
    // Plan before allocating: an impossible budget is reported without touching the GPU.
    const auto bytes = unit_bytes(layout, config_.dtype);
    // A budget that holds every unit keeps them all resident (prefetched once here), as a smart
    // system would; otherwise the plan decides which units stream through the slots.
    const auto plan =
        plan_residency(bytes, config_.budget_bytes, streaming_slots(config_.prefetch_depth), config_.resident);
    resident_ = plan.resident;
    slots_ = plan.slots;
    stats_ = PlacementStats{};
    stats_.resident_bytes = plan.resident_bytes;
    stats_.streamed_bytes = plan.streamed_bytes;
    stats_.device_weight_bytes = plan.device_bytes();
    stats_.resident_units = plan.resident_units();
    stats_.streamed_units = plan.streamed_units();
    stats_.slots = plan.slots;

    weights_.reset();
    weights_.emplace(layout, config_.dtype, fill, config_.allow_oversubscription);
    if (config_.evict == UvmEvict::read_mostly)
        for (int u = 0; u < weights_->units(); ++u) weights_->set_read_mostly(u);

    streamed_.clear();
    seq_of_unit_.assign(bytes.size(), -1);
    prefetched_.clear();
    released_.clear();
    evicted_.clear();
    for (std::size_t u = 0; u < bytes.size(); ++u) {
        prefetched_.emplace_back();
        released_.emplace_back();
        evicted_.emplace_back();
        if (resident_[u]) {
            weights_->prefetch_to_device(static_cast<int>(u), evict_stream_.get());
        } else {
            seq_of_unit_[u] = static_cast<int>(streamed_.size());
            streamed_.push_back(static_cast<int>(u));
        }
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    issued_ = acquired_ = released_count_ = evicted_count_ = 0;
}

void UvmPrefetchBackend::reset_residency() {
    if (!weights_) return;
    CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
    for (const auto& s : prefetch_streams_) CUDA_CHECK(cudaStreamSynchronize(s.get()));
    CUDA_CHECK(cudaStreamSynchronize(evict_stream_.get()));
    for (const int u : streamed_) {
        if (config_.evict == UvmEvict::migrate)
            weights_->prefetch_to_host(u, evict_stream_.get());
        else
            weights_->drop_device_copy(u);
    }
    CUDA_CHECK(cudaStreamSynchronize(evict_stream_.get()));
    issued_ = acquired_ = released_count_ = evicted_count_ = 0;
}

cudaStream_t UvmPrefetchBackend::prefetch_stream(int seq) const {
    if (prefetch_streams_.empty()) return compute_stream();
    return prefetch_streams_[static_cast<std::size_t>(seq) % prefetch_streams_.size()].get();
}

void UvmPrefetchBackend::check_unit(int unit) const {
    if (!weights_ || unit < 0 || unit >= weights_->units())
        throw std::out_of_range("uvm-prefetch backend: no unit " + std::to_string(unit));
}

// Streamed unit `seq` may come to the device once unit seq - S has left it (S slots of room in
// the budget). Evicts up to there; returns false when a unit to evict is still in use, or —
// without `host_wait_allowed` — when evicting a read-mostly unit would make the host wait for
// kernels it has just enqueued: that unit is evicted at the next release instead, when its
// kernels are most likely done, so the host keeps enqueuing ahead of the GPU.
bool UvmPrefetchBackend::make_room_for(int seq, bool host_wait_allowed) {
    if (!budget_limited()) return true;
    while (evicted_count_ <= seq - slots_) {
        if (evicted_count_ >= released_count_) return false;
        const bool just_released = evicted_count_ == released_count_ - 1;
        if (!host_wait_allowed && config_.evict == UvmEvict::read_mostly && just_released) return false;
        evict_next();
    }
    return true;
}

void UvmPrefetchBackend::evict_next() {
    const int unit = streamed_[static_cast<std::size_t>(evicted_count_)];
    const auto u = static_cast<std::size_t>(unit);
    if (config_.evict == UvmEvict::migrate) {
        released_[u].wait_on(evict_stream_.get());
        weights_->prefetch_to_host(unit, evict_stream_.get());
        evicted_[u].record(evict_stream_.get());
    } else {
        // Host wait, unavoidable: cudaMemAdvise is not stream-ordered, so the read-only duplicate
        // may only be dropped once the kernels that read the unit have finished.
        CUDA_CHECK(cudaEventSynchronize(released_[u].get()));
        weights_->drop_device_copy(unit);
    }
    ++evicted_count_;
}

// Prefetches streamed unit `issued_`; make_room_for(issued_) succeeded. A migration back to the
// host is stream-ordered, so the prefetch waits for it on the GPU instead of the host waiting.
void UvmPrefetchBackend::issue_next_prefetch() {
    const int seq = issued_;
    const int unit = streamed_[static_cast<std::size_t>(seq)];
    const cudaStream_t stream = prefetch_stream(seq);
    if (budget_limited() && config_.evict == UvmEvict::migrate && seq >= slots_)
        evicted_[static_cast<std::size_t>(streamed_[static_cast<std::size_t>(seq - slots_)])].wait_on(stream);
    weights_->prefetch_to_device(unit, stream);
    prefetched_[static_cast<std::size_t>(unit)].record(stream);
    ++issued_;
}

// Issues the prefetches of this forward's streamed units up to `last_seq`, in order, as far as
// the budget allows now. The look-ahead does not wrap into the next forward: reset_residency()
// starts every forward with the streamed units on the host.
void UvmPrefetchBackend::issue_prefetches_through(int last_seq, bool host_wait_allowed) {
    last_seq = std::min(last_seq, static_cast<int>(streamed_.size()) - 1);
    while (issued_ <= last_seq) {
        if (!make_room_for(issued_, host_wait_allowed)) return;
        issue_next_prefetch();
    }
}

// Without prefetch the unit's kernels fault it in: they must start after the migration that
// made room for it.
void UvmPrefetchBackend::wait_for_room_on_compute(int seq) const {
    if (budget_limited() && config_.evict == UvmEvict::migrate && seq >= slots_)
        evicted_[static_cast<std::size_t>(streamed_[static_cast<std::size_t>(seq - slots_)])].wait_on(compute_stream());
}

const void* UvmPrefetchBackend::acquire(int unit) {
    check_unit(unit);
    const auto u = static_cast<std::size_t>(unit);
    const int depth = config_.prefetch_depth;
    if (resident_[u]) {
        // The first acquire of a forward (unit 0) starts the look-ahead even when unit 0 is resident.
        if (look_ahead()) issue_prefetches_through(released_count_ + depth, false);
        return weights_->unit_pointer(unit);
    }
    const int seq = seq_of_unit_[u];
    if (seq != acquired_) {
        throw std::logic_error("uvm-prefetch backend: unit " + std::to_string(unit) +
                               " acquired out of forward order; streamed units are acquired once each, in order, "
                               "and reset_residency() starts every forward");
    }
    if (depth == 0) {
        if (!make_room_for(seq, true)) {
            throw std::logic_error("uvm-prefetch backend: unit " + std::to_string(unit) +
                                   " acquired before the unit it replaces was released");
        }
        wait_for_room_on_compute(seq);
    } else {
        if (look_ahead()) issue_prefetches_through(released_count_ + depth, false);
        issue_prefetches_through(seq, true);  // jit: the unit itself; look-ahead: normally done already
        if (issued_ <= seq) {
            throw std::logic_error("uvm-prefetch backend: unit " + std::to_string(unit) +
                                   " acquired before the unit it replaces was released");
        }
        // jit reproduces the seed, which did not wait for its prefetches: a kernel touching pages
        // still in flight faults on them and the driver orders the two.
        if (look_ahead()) prefetched_[u].wait_on(compute_stream());
    }
    ++acquired_;
    return weights_->unit_pointer(unit);
}

void UvmPrefetchBackend::release(int unit) {
    check_unit(unit);
    const int seq = seq_of_unit_[static_cast<std::size_t>(unit)];
    if (seq < 0) return;  // resident: stays on the device
    if (seq != released_count_ || seq >= acquired_) {
        throw std::logic_error("uvm-prefetch backend: unit " + std::to_string(unit) +
                               " released out of forward order or without being acquired");
    }
    // The unit's kernels are enqueued, not finished: its eviction waits on this event.
    released_[static_cast<std::size_t>(unit)].record(compute_stream());
    ++released_count_;
    if (look_ahead()) issue_prefetches_through(released_count_ + config_.prefetch_depth, false);
}

}  // namespace sweetspot
