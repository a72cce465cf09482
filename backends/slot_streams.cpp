#include "backends/slot_streams.hpp"

namespace sweetspot {

SlotStreams::SlotStreams(int streams, cudaStream_t compute) : compute_(compute) {
    streams_.reserve(static_cast<std::size_t>(streams));
    for (int i = 0; i < streams; ++i) streams_.emplace_back();
}

void SlotStreams::make_slots(int slots) {
    released_.clear();
    fetched_.clear();
    for (int s = 0; s < slots; ++s) {
        released_.emplace_back();
        fetched_.emplace_back();
    }
}

cudaStream_t SlotStreams::fetch_stream(int seq) const {
    if (streams_.empty()) return compute_;
    return streams_[static_cast<std::size_t>(seq) % streams_.size()].get();
}

void SlotStreams::synchronize() const {
    CUDA_CHECK(cudaStreamSynchronize(compute_));
    for (const auto& s : streams_) CUDA_CHECK(cudaStreamSynchronize(s.get()));
}

}  // namespace sweetspot
