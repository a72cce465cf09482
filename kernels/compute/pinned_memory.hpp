#pragma once
// Page-locked host memory, made fast to get. cudaHostAlloc pins page by page in one thread, which
// takes seconds for a large model's weights, and freeing it takes long too. Here the memory is
// mapped anonymously, asked for transparent huge pages, first touched by every core, then
// registered with CUDA, in a fraction of that time either way (docs/benchmarks-history.md, "Where the
// weights phase went"). Registered mapped, so kernels can write into it through device_pointer()
// (a synthetic fill of explicit-copy's weights never runs on the host's cores). It can be made in
// pieces, each ready as soon as it is registered.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace sweetspot {

class PinnedHostMemory {
public:
    // Called with a piece's index and its device address as soon as it is registered, while the
    // next piece is touched.
    using PieceReady = std::function<void(std::size_t piece, std::byte* device)>;

    PinnedHostMemory() = default;
    // `bytes` of zeroed page-locked memory; throws std::runtime_error when the host has no room
    // and CudaError when CUDA cannot register it.
    explicit PinnedHostMemory(std::int64_t bytes);
    // The same, registered in pieces starting at `piece_offsets` (the first 0, each a multiple of
    // kPinnedPieceAlignmentBytes, increasing): each piece is touched by every core, then
    // registered while the cores touch the next one, and `ready` runs for it (to start the kernels
    // that fill it). Touching and registering take about as long as each other, so in pieces the
    // two overlap. A copy must not span two pieces (each is its own registration).
    PinnedHostMemory(std::int64_t bytes, std::span<const std::int64_t> piece_offsets, const PieceReady& ready);
    ~PinnedHostMemory() { reset(); }
    PinnedHostMemory(PinnedHostMemory&& other) noexcept;
    PinnedHostMemory& operator=(PinnedHostMemory&& other) noexcept;
    PinnedHostMemory(const PinnedHostMemory&) = delete;
    PinnedHostMemory& operator=(const PinnedHostMemory&) = delete;

    std::byte* get() const { return host_; }
    // The same memory as kernels address it.
    std::byte* device_pointer() const { return device_; }

private:
    void reset() noexcept;

    std::byte* host_ = nullptr;
    std::byte* device_ = nullptr;
    std::size_t mapped_bytes_ = 0;            // the bytes asked for, rounded up to whole huge pages
    std::vector<std::byte*> registered_;      // the start of each registered piece
};

// Pieces of page-locked memory start on huge pages: two registrations may not share a page.
inline constexpr std::int64_t kPinnedPieceAlignmentBytes = std::int64_t{2} << 20;

inline PinnedHostMemory allocate_pinned(std::int64_t bytes) { return PinnedHostMemory(bytes); }

}  // namespace sweetspot
