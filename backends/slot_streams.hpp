#pragma once
// The CUDA side of a SlotRing that the streaming backends share: the streams that fetch streamed
// units and, per slot, the two events that order them against the compute stream:
//   fetch of streamed unit k into slot k % S on fetch_stream(k): after released[slot] (recorded
//     on the compute stream when unit k - S was released), then records fetched[slot];
//   acquire: the compute stream waits for fetched[slot];
//   release: records released[slot] on the compute stream.
// The backends' fetches may wait on more (uvm-prefetch waits for the migration that vacated the
// slot, which itself waited for released[slot]).
#include <vector>

#include "kernels/compute/cuda_resources.hpp"

namespace sweetspot {

class SlotStreams {
public:
    // `streams` fetch streams, used round-robin; with none, fetches run on the compute stream and
    // serialize with compute.
    SlotStreams(int streams, cudaStream_t compute);

    // Events for a placement with `slots` slots.
    void make_slots(int slots);
    cudaStream_t compute() const { return compute_; }
    cudaStream_t fetch_stream(int seq) const;
    // Waits for everything enqueued on the compute and fetch streams.
    void synchronize() const;

    // The slot's kernels are enqueued on the compute stream, not finished: whatever next reuses
    // the slot waits on this.
    void mark_released(int slot) const { slot_event(released_, slot).record(compute_); }
    void wait_released(int slot, cudaStream_t stream) const { slot_event(released_, slot).wait_on(stream); }
    // The event itself, for work that may wait on the host instead (work that is not
    // stream-ordered, such as uvm-prefetch's read-mostly eviction).
    const CudaEvent& released(int slot) const { return slot_event(released_, slot); }

    void mark_fetched(int slot, cudaStream_t stream) const { slot_event(fetched_, slot).record(stream); }
    void await_fetched(int slot) const { slot_event(fetched_, slot).wait_on(compute_); }

private:
    static const CudaEvent& slot_event(const std::vector<CudaEvent>& events, int slot) {
        return events[static_cast<std::size_t>(slot)];
    }

    cudaStream_t compute_;
    std::vector<CudaStream> streams_;
    std::vector<CudaEvent> released_, fetched_;  // one of each per slot
};

}  // namespace sweetspot
