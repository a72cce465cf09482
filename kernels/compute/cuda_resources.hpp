#pragma once
// RAII owners for CUDA resources: streams, events, device, pinned (pinned_memory.hpp) and managed
// memory, shared by the GPU forward, the backends and the harness. Creation goes through
// CUDA_CHECK; destruction ignores errors, because a destructor must not throw and an error there
// means the context is already lost (the error was reported by the call that broke it).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/managed_memory.hpp"
#include "kernels/compute/pinned_memory.hpp"

namespace sweetspot {

// A stream that does not synchronize implicitly with the legacy default stream: every ordering
// between the backends' streams and the compute stream is an explicit event.
class CudaStream {
public:
    CudaStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
    ~CudaStream() {
        if (stream_) (void)cudaStreamDestroy(stream_);
    }
    CudaStream(CudaStream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
    CudaStream(const CudaStream&) = delete;
    CudaStream& operator=(const CudaStream&) = delete;
    CudaStream& operator=(CudaStream&&) = delete;

    cudaStream_t get() const { return stream_; }

private:
    cudaStream_t stream_ = nullptr;
};

// An event for ordering; created without timing (cheaper to record and wait on) unless it is
// asked to time a region.
class CudaEvent {
public:
    enum class Timing { off, on };
    explicit CudaEvent(Timing timing = Timing::off) {
        CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing == Timing::on ? cudaEventDefault : cudaEventDisableTiming));
    }
    ~CudaEvent() {
        if (event_) (void)cudaEventDestroy(event_);
    }
    CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
    CudaEvent(const CudaEvent&) = delete;
    CudaEvent& operator=(const CudaEvent&) = delete;
    CudaEvent& operator=(CudaEvent&&) = delete;

    cudaEvent_t get() const { return event_; }
    void record(cudaStream_t stream) const { CUDA_CHECK(cudaEventRecord(event_, stream)); }
    // Work enqueued on `stream` from now on runs after the work captured by the last record().
    void wait_on(cudaStream_t stream) const { CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }
    void synchronize() const { CUDA_CHECK(cudaEventSynchronize(event_)); }
    // Whether the work captured by the last record() is done (an event never recorded is).
    bool complete() const {
        const cudaError_t status = cudaEventQuery(event_);
        if (status == cudaErrorNotReady) return false;
        CUDA_CHECK(status);
        return true;
    }
    // Milliseconds from `start` to this event; both timing events, both complete.
    float ms_since(const CudaEvent& start) const {
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
        return ms;
    }

private:
    cudaEvent_t event_ = nullptr;
};

// Memory released by `Free`: cudaFree, for cudaMalloc and cudaMallocManaged memory. cudaFree waits
// for the device to be idle first, so memory still in use by enqueued work is never freed under it.
template <cudaError_t (*Free)(void*)>
class CudaMemory {
public:
    CudaMemory() = default;
    explicit CudaMemory(void* adopted) : ptr_(adopted) {}
    ~CudaMemory() { reset(); }
    CudaMemory(CudaMemory&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)) {}
    CudaMemory& operator=(CudaMemory&& other) noexcept {
        if (this != &other) {
            reset();
            ptr_ = std::exchange(other.ptr_, nullptr);
        }
        return *this;
    }
    CudaMemory(const CudaMemory&) = delete;
    CudaMemory& operator=(const CudaMemory&) = delete;

    std::byte* get() const { return static_cast<std::byte*>(ptr_); }

private:
    void reset() noexcept {
        if (ptr_) (void)Free(ptr_);
        ptr_ = nullptr;
    }
    void* ptr_ = nullptr;
};

using DeviceMemory = CudaMemory<cudaFree>;
using ManagedMemory = CudaMemory<cudaFree>;

inline DeviceMemory allocate_device(std::int64_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, static_cast<std::size_t>(bytes)));
    return DeviceMemory(p);
}

// The only door to managed memory is allocate_managed (kernels/compute/managed_memory.hpp): it refuses
// requests larger than the free device memory before anything is allocated.
inline ManagedMemory allocate_managed_memory(std::int64_t bytes, bool allow_oversubscription) {
    return ManagedMemory(allocate_managed(bytes, allow_oversubscription));
}

inline int current_device() {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    return device;
}

}  // namespace sweetspot
