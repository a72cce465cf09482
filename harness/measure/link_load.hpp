#pragma once
// Copies across the host link, both ways at once, on a thread of their own: the load an
// explicit-copy training step puts on the host's memory besides its update's streams (the weights
// read from page-locked memory on their way up, the gradients written on their way down). A cell
// measures its update arrays' in-place rate under this load (gpu_cell.cpp): the host's memory then
// moves the cores' streams and the copies together, and the sum of the two rates is what it gives
// a step that does both.
#include <cstddef>
#include <exception>
#include <span>
#include <stop_token>
#include <thread>

namespace sweetspot {

struct LinkRates {
    double to_device_gbps = 0, to_host_gbps = 0;  // 1e9 bytes a second, from the first copy to stop()
    double gbps() const { return to_device_gbps + to_host_gbps; }
};

class LinkLoad {
public:
    // Copies `bytes` from `host_source` into device[0, bytes) and device[bytes, 2 · bytes) into
    // `host_sink`, over and over until stop(); both host buffers page-locked (as a step's are),
    // `device` at least 2 · bytes, none of them read by anyone else meanwhile (the sink and the
    // device bytes are overwritten).
    // Throws std::invalid_argument for no bytes or too small a device span.
    LinkLoad(std::span<std::byte> device, const void* host_source, void* host_sink, std::size_t bytes);
    ~LinkLoad();
    LinkLoad(const LinkLoad&) = delete;
    LinkLoad& operator=(const LinkLoad&) = delete;

    // Lets the copies in flight finish and returns the rates each way; rethrows a failed copy's
    // CudaError. Once only.
    LinkRates stop();

private:
    void copy_until(std::stop_token stop);

    std::byte* device_;
    const void* host_source_;
    void* host_sink_;
    std::size_t bytes_;
    LinkRates rates_;
    std::exception_ptr error_;
    std::jthread thread_;
};

}  // namespace sweetspot
