#include "harness/measure/link_load.hpp"

#include <cuda_runtime_api.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"

namespace sweetspot {
namespace {

// A copy of a few hundred MiB takes milliseconds: polling this often keeps the link busy without
// the thread spinning on a core the measured streams need.
constexpr auto kPoll = std::chrono::microseconds(200);

bool finished(cudaStream_t stream) {
    const cudaError_t status = cudaStreamQuery(stream);
    if (status == cudaErrorNotReady) return false;
    CUDA_CHECK(status);
    return true;
}

}  // namespace

LinkLoad::LinkLoad(std::span<std::byte> device, const void* host_source, void* host_sink, std::size_t bytes)
    : device_(device.data()), host_source_(host_source), host_sink_(host_sink), bytes_(bytes) {
    if (bytes == 0 || device.size() / 2 < bytes) {
        throw std::invalid_argument("LinkLoad: " + std::to_string(bytes) +
                                    " bytes each way need twice that on the device; " + std::to_string(device.size()) +
                                    " given.");
    }
    thread_ = std::jthread([this](std::stop_token stop) { copy_until(std::move(stop)); });
}

LinkLoad::~LinkLoad() = default;

void LinkLoad::copy_until(std::stop_token stop) {
    try {
        // Each way starts its next copy as soon as its last one ends, so neither waits for the other.
        const CudaStream up, down;
        const auto copy_up = [&] {
            CUDA_CHECK(cudaMemcpyAsync(device_, host_source_, bytes_, cudaMemcpyHostToDevice, up.get()));
        };
        const auto copy_down = [&] {
            CUDA_CHECK(cudaMemcpyAsync(host_sink_, device_ + bytes_, bytes_, cudaMemcpyDeviceToHost, down.get()));
        };
        double up_bytes = 0, down_bytes = 0;
        const auto start = std::chrono::steady_clock::now();
        copy_up();
        copy_down();
        while (!stop.stop_requested()) {
            std::this_thread::sleep_for(kPoll);
            if (finished(up.get())) {
                up_bytes += static_cast<double>(bytes_);
                copy_up();
            }
            if (finished(down.get())) {
                down_bytes += static_cast<double>(bytes_);
                copy_down();
            }
        }
        CUDA_CHECK(cudaStreamSynchronize(up.get()));
        CUDA_CHECK(cudaStreamSynchronize(down.get()));
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        rates_ = LinkRates{(up_bytes + static_cast<double>(bytes_)) / seconds / 1e9,
                           (down_bytes + static_cast<double>(bytes_)) / seconds / 1e9};
    } catch (...) {
        error_ = std::current_exception();
    }
}

LinkRates LinkLoad::stop() {
    thread_.request_stop();
    thread_.join();
    if (error_) std::rethrow_exception(error_);
    return rates_;
}

}  // namespace sweetspot
