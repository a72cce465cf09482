#pragma once
// The streaming-slot protocol of the explicit-copy and uvm-prefetch backends. The units a
// residency plan does not keep resident are streamed, in the order the step reads them (its
// UnitSchedule), through a ring of S device slots: the k-th streamed read (its sequence number)
// goes into slot k % S, and only once read k - S was released and vacated. Each step acquires and
// releases the streamed reads in that order (a unit read twice is streamed twice); with a
// look-ahead depth n >= 1 (and S = n + 1) the fetches of the next n are in flight while one is
// computed, otherwise a unit is fetched when it is acquired.
//
// Plain C++, so the bookkeeping is tested on every machine: the device work of each step (the
// copies or prefetches, the streams and the events that order them against the compute stream)
// is behind SlotRing::Device, which the backends implement with CUDA (backends/slot_streams.hpp).
#include <optional>
#include <string>
#include <vector>

namespace sweetspot {

class SlotRing {
public:
    // A streamed unit in the ring.
    struct Entry {
        int seq = 0;   // its place among the streamed reads of the step
        int unit = 0;
        int slot = 0;  // seq % S
    };

    // What the device does at each step; the ring decides when each step runs.
    class Device {
    public:
        // Starts bringing the entry's unit into its slot, after the slot's previous unit left it.
        virtual void fetch(const Entry& entry) = 0;
        // Makes the compute stream wait until the entry's fetch is usable (acquire).
        virtual void await_fetch(const Entry& entry) = 0;
        // The compute stream's kernels that read the entry's slot are enqueued (release).
        virtual void mark_released(const Entry& entry) = 0;
        // Takes a released unit out of its slot before the slot is fetched into again. Nothing to
        // do for a device whose slots are free once released.
        virtual void vacate(const Entry&) {}
        // Whether vacate makes the host wait for the unit's kernels. The look-ahead then leaves the
        // unit released last to a later release or acquire, when its kernels are most likely
        // done, so the host keeps enqueuing ahead of the GPU.
        virtual bool vacate_waits_on_host() const { return false; }

    protected:
        ~Device() = default;
    };

    // The end of the refusal of an acquire past the slots, after "unit N acquired ".
    using FullRingText = std::string (*)(int slots);

    // `owner` starts every error message, e.g. "explicit-copy backend".
    SlotRing(std::string owner, FullRingText full_ring_text);

    // A new placement: the units not `resident`, read in the order of `reads` (every unit's
    // index, as many times as a step reads it: UnitSchedule::reads), stream through `slots` slots.
    // A prefetch depth n >= 1 fetches up to n reads ahead of the one being computed (as far as the
    // slots allow); 0 (off) and -1 (jit) fetch a unit when it is acquired. Starts a step. Throws
    // std::logic_error when units stream but there is no slot, std::out_of_range for a read of no
    // unit.
    void place(const std::vector<bool>& resident, const std::vector<int>& reads, int slots, int prefetch_depth);
    // No units: every acquire and release is refused until the next place().
    void clear();
    // Every step starts with no streamed read fetched, acquired, released or vacated.
    void start_step();

    // The slot holding `unit` for the compute stream's work enqueued from now on (the device made
    // that stream wait for the fetch); nullopt for a resident unit. Throws std::out_of_range for
    // no such unit, std::logic_error for a streamed unit acquired out of the schedule's order or
    // while its slot still holds a unit not released.
    std::optional<int> acquire(int unit, Device& device);
    // Throws std::logic_error for a streamed unit released out of order or not acquired.
    void release(int unit, Device& device);

    int slots() const { return slots_; }
    // Streamed reads of a step, and the unit of each.
    int streamed_reads() const { return static_cast<int>(streamed_.size()); }
    int unit_at(int seq) const { return streamed_[static_cast<std::size_t>(seq)]; }
    bool resident(int unit) const { return resident_[static_cast<std::size_t>(unit)]; }

private:
    bool look_ahead() const { return prefetch_depth_ >= 1; }
    Entry entry(int seq) const { return {seq, unit_at(seq), seq % slots_}; }
    void check_unit(int unit) const;
    void fetch_ahead(Device& device);
    void fetch_through(int last_seq, bool host_may_wait, Device& device);
    bool make_room_for(int seq, bool host_may_wait, Device& device);

    std::string owner_;
    FullRingText full_ring_text_;
    int slots_ = 0, prefetch_depth_ = 0;
    std::vector<int> streamed_;   // the unit of each streamed read, in the step's order; index = sequence number
    std::vector<bool> resident_;  // per unit

    // Streamed reads of the current step whose fetch was issued / that were acquired / released /
    // vacated.
    int fetched_ = 0, acquired_ = 0, released_ = 0, vacated_ = 0;
};

}  // namespace sweetspot
