#include "kernels/compute/pinned_memory.hpp"

#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "base/parallel_for.hpp"
#include "kernels/compute/cuda_check.hpp"

namespace sweetspot {
namespace {

constexpr std::int64_t kPage = 4096;
constexpr std::int64_t kWhole[] = {0};  // one piece

// Zero pages are mapped on first write: writing one byte of each page from every core spreads the
// page faults (and the kernel's zeroing) that cudaHostRegister would otherwise take one at a time.
void first_touch(std::byte* base, std::int64_t bytes) {
    parallel_for(bytes, [base](std::int64_t begin, std::int64_t end) {
        for (std::int64_t p = (begin + kPage - 1) / kPage * kPage; p < end; p += kPage) base[p] = std::byte{0};
    });
}

}  // namespace

PinnedHostMemory::PinnedHostMemory(std::int64_t bytes) : PinnedHostMemory(bytes, kWhole, {}) {}

PinnedHostMemory::PinnedHostMemory(std::int64_t bytes, std::span<const std::int64_t> piece_offsets,
                                   const PieceReady& ready) {
    if (bytes <= 0) throw std::invalid_argument("PinnedHostMemory: " + std::to_string(bytes) + " bytes");
    for (std::size_t i = 0; i < piece_offsets.size(); ++i) {
        const std::int64_t at = piece_offsets[i];
        if ((i == 0 && at != 0) || (i > 0 && at <= piece_offsets[i - 1]) || at % kPinnedPieceAlignmentBytes != 0 ||
            at >= bytes)
            throw std::invalid_argument("PinnedHostMemory: piece " + std::to_string(i) + " at " + std::to_string(at) +
                                        " is not on a huge page after the one before it, inside " +
                                        std::to_string(bytes) + " bytes");
    }
    if (piece_offsets.empty()) throw std::invalid_argument("PinnedHostMemory: no piece");
    const auto huge = static_cast<std::size_t>(kPinnedPieceAlignmentBytes);
    mapped_bytes_ = (static_cast<std::size_t>(bytes) + huge - 1) / huge * huge;
    void* p = mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        const int error = errno;
        mapped_bytes_ = 0;
        throw std::runtime_error("cannot map " + std::to_string(bytes) + " bytes of host memory for page-locked weights: " +
                                 std::strerror(error));
    }
    host_ = static_cast<std::byte*>(p);
    // Advice only: where transparent huge pages are off, the memory is pinned in 4 KiB pages.
    (void)madvise(p, mapped_bytes_, MADV_HUGEPAGE);

    const auto begin = [&](std::size_t i) { return static_cast<std::size_t>(piece_offsets[i]); };
    const auto end = [&](std::size_t i) { return i + 1 < piece_offsets.size() ? begin(i + 1) : mapped_bytes_; };
    std::atomic<std::size_t> touched{0};
    std::atomic<bool> stop{false};
    try {
        // The cores touch piece i + 1 while this thread registers piece i.
        const std::jthread toucher([&] {
            for (std::size_t i = 0; i < piece_offsets.size() && !stop; ++i) {
                first_touch(host_ + begin(i), static_cast<std::int64_t>(end(i) - begin(i)));
                touched.store(i + 1);
                touched.notify_all();
            }
        });
        try {
            for (std::size_t i = 0; i < piece_offsets.size(); ++i) {
                for (std::size_t t = touched.load(); t <= i; t = touched.load()) touched.wait(t);
                std::byte* piece = host_ + begin(i);
                CUDA_CHECK(cudaHostRegister(piece, end(i) - begin(i), cudaHostRegisterPortable | cudaHostRegisterMapped));
                registered_.push_back(piece);
                void* device = nullptr;
                CUDA_CHECK(cudaHostGetDevicePointer(&device, piece, 0));
                // With unified addressing (every 64-bit Linux host) a registered piece has its host
                // address on the device too, so the pieces are one range there as well.
                if (i == 0) device_ = static_cast<std::byte*>(device);
                else if (static_cast<std::byte*>(device) != device_ + begin(i))
                    throw std::runtime_error("page-locked pieces are not contiguous in the device's address space");
                if (ready) ready(i, device_ + begin(i));
            }
        } catch (...) {
            stop = true;  // before the toucher is joined
            throw;
        }
    } catch (...) {
        reset();
        throw;
    }
}

PinnedHostMemory::PinnedHostMemory(PinnedHostMemory&& other) noexcept
    : host_(std::exchange(other.host_, nullptr)), device_(std::exchange(other.device_, nullptr)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)), registered_(std::exchange(other.registered_, {})) {}

PinnedHostMemory& PinnedHostMemory::operator=(PinnedHostMemory&& other) noexcept {
    if (this != &other) {
        reset();
        host_ = std::exchange(other.host_, nullptr);
        device_ = std::exchange(other.device_, nullptr);
        mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
        registered_ = std::exchange(other.registered_, {});
    }
    return *this;
}

// cudaHostUnregister does not wait for copies still reading the memory, as cudaFreeHost does:
// wait for the device first, so enqueued work never reads memory that is gone.
void PinnedHostMemory::reset() noexcept {
    if (!host_) return;
    (void)cudaDeviceSynchronize();
    for (std::byte* piece : registered_) (void)cudaHostUnregister(piece);
    registered_.clear();
    munmap(host_, mapped_bytes_);
    host_ = nullptr;
    device_ = nullptr;
    mapped_bytes_ = 0;
}

}  // namespace sweetspot
