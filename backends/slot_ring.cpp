#include "backends/slot_ring.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace sweetspot {

SlotRing::SlotRing(std::string owner, FullRingText full_ring_text)
    : owner_(std::move(owner)), full_ring_text_(full_ring_text) {}

void SlotRing::place(const std::vector<bool>& resident, const std::vector<int>& reads, int slots, int prefetch_depth) {
    clear();
    resident_ = resident;
    for (const int unit : reads) {
        check_unit(unit);
        if (!resident_[static_cast<std::size_t>(unit)]) streamed_.push_back(unit);
    }
    if (!streamed_.empty() && slots < 1) {
        clear();
        throw std::logic_error(owner_ + ": streamed units need at least one slot, got " + std::to_string(slots));
    }
    slots_ = slots;
    prefetch_depth_ = prefetch_depth;
}

void SlotRing::clear() {
    streamed_.clear();
    resident_.clear();
    slots_ = 0;
    start_step();
}

void SlotRing::start_step() { fetched_ = acquired_ = released_ = vacated_ = 0; }

void SlotRing::check_unit(int unit) const {
    if (unit < 0 || unit >= static_cast<int>(resident_.size()))
        throw std::out_of_range(owner_ + ": no unit " + std::to_string(unit));
}

std::optional<int> SlotRing::acquire(int unit, Device& device) {
    check_unit(unit);
    if (resident(unit)) {
        // The first acquire of a step starts the look-ahead even when its unit is resident.
        if (look_ahead()) fetch_ahead(device);
        return std::nullopt;
    }
    const int seq = acquired_;
    if (seq >= streamed_reads() || unit_at(seq) != unit) {
        throw std::logic_error(owner_ + ": unit " + std::to_string(unit) +
                               " acquired out of the schedule's order; streamed units are acquired as the step's "
                               "schedule reads them, and reset_residency() starts every step");
    }
    if (look_ahead()) fetch_ahead(device);
    fetch_through(seq, true, device);  // jit / off: the unit itself; look-ahead: normally done already
    if (fetched_ <= seq)
        throw std::logic_error(owner_ + ": unit " + std::to_string(unit) + " acquired " + full_ring_text_(slots_));
    const Entry e = entry(seq);
    device.await_fetch(e);
    ++acquired_;
    return e.slot;
}

void SlotRing::release(int unit, Device& device) {
    check_unit(unit);
    if (resident(unit)) return;  // stays on the device
    const int seq = released_;
    if (seq >= acquired_ || unit_at(seq) != unit) {
        throw std::logic_error(owner_ + ": unit " + std::to_string(unit) +
                               " released out of the schedule's order or without being acquired");
    }
    device.mark_released(entry(seq));
    ++released_;
    if (look_ahead()) fetch_ahead(device);
}

// Look-ahead: the next prefetch_depth units after the one being computed (unit `released_`).
void SlotRing::fetch_ahead(Device& device) { fetch_through(released_ + prefetch_depth_, false, device); }

// Fetches this step's streamed reads up to `last_seq`, in order, as far as the slots allow now.
// The look-ahead does not wrap into the next step: start_step() begins every step with nothing
// fetched.
void SlotRing::fetch_through(int last_seq, bool host_may_wait, Device& device) {
    last_seq = std::min(last_seq, streamed_reads() - 1);
    while (fetched_ <= last_seq) {
        if (!make_room_for(fetched_, host_may_wait, device)) return;
        device.fetch(entry(fetched_));
        ++fetched_;
    }
}

// Unit `seq` goes into the slot of unit seq - S: vacates every unit up to that one. Returns false
// when one of them is not released yet, or when vacating the unit released last would make the
// host wait and the caller does not allow it.
bool SlotRing::make_room_for(int seq, bool host_may_wait, Device& device) {
    while (vacated_ <= seq - slots_) {
        if (vacated_ >= released_) return false;
        const bool released_last = vacated_ == released_ - 1;
        if (!host_may_wait && released_last && device.vacate_waits_on_host()) return false;
        device.vacate(entry(vacated_));
        ++vacated_;
    }
    return true;
}

}  // namespace sweetspot
