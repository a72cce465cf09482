#include "kernels/compute/pinned_memory.hpp"

#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/parallel_for.hpp"

namespace sweetspot {
namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::int64_t kPage = 4096;

// Zero pages are mapped on first write: writing one byte of each page from every core spreads the
// page faults (and the kernel's zeroing) that cudaHostRegister would otherwise take one at a time.
void first_touch(std::byte* base, std::int64_t bytes) {
    parallel_for(bytes, [base](std::int64_t begin, std::int64_t end) {
        for (std::int64_t p = (begin + kPage - 1) / kPage * kPage; p < end; p += kPage) base[p] = std::byte{0};
    });
}

}  // namespace

PinnedHostMemory::PinnedHostMemory(std::int64_t bytes) {
    if (bytes <= 0) throw std::invalid_argument("PinnedHostMemory: " + std::to_string(bytes) + " bytes");
    mapped_bytes_ = (static_cast<std::size_t>(bytes) + kHugePage - 1) / kHugePage * kHugePage;
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
    first_touch(host_, static_cast<std::int64_t>(mapped_bytes_));
    try {
        CUDA_CHECK(cudaHostRegister(p, mapped_bytes_, cudaHostRegisterPortable | cudaHostRegisterMapped));
    } catch (...) {
        munmap(p, mapped_bytes_);
        host_ = nullptr;
        throw;
    }
    void* device = nullptr;
    try {
        CUDA_CHECK(cudaHostGetDevicePointer(&device, p, 0));
    } catch (...) {
        reset();
        throw;
    }
    device_ = static_cast<std::byte*>(device);
}

PinnedHostMemory::PinnedHostMemory(PinnedHostMemory&& other) noexcept
    : host_(std::exchange(other.host_, nullptr)), device_(std::exchange(other.device_, nullptr)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)) {}

PinnedHostMemory& PinnedHostMemory::operator=(PinnedHostMemory&& other) noexcept {
    if (this != &other) {
        reset();
        host_ = std::exchange(other.host_, nullptr);
        device_ = std::exchange(other.device_, nullptr);
        mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    }
    return *this;
}

// cudaHostUnregister does not wait for copies still reading the memory, as cudaFreeHost does:
// wait for the device first, so enqueued work never reads memory that is gone.
void PinnedHostMemory::reset() noexcept {
    if (!host_) return;
    (void)cudaDeviceSynchronize();
    (void)cudaHostUnregister(host_);
    munmap(host_, mapped_bytes_);
    host_ = nullptr;
    device_ = nullptr;
    mapped_bytes_ = 0;
}

}  // namespace sweetspot
