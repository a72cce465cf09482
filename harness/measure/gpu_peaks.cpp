#include "harness/measure/gpu_peaks.hpp"

#include <algorithm>
#include <array>

namespace sweetspot {
namespace {

struct GpuPeak {
    std::string_view name;
    double fp32, tf32, half;  // half: fp16 and bf16 alike on these parts
};

// H100 SXM5 and H200 share the GH100 die at the same clocks; the PCIe and NVL parts run lower.
constexpr std::array<GpuPeak, 7> kPeaks = {{
    {"NVIDIA H100 80GB HBM3", 66.9, 494.7, 989.4},
    {"NVIDIA H200", 66.9, 494.7, 989.4},
    {"NVIDIA H100 PCIe", 51.2, 378.0, 756.0},
    {"NVIDIA H100 NVL", 60.0, 417.5, 835.0},
    {"NVIDIA A100-SXM4-80GB", 19.5, 156.0, 312.0},
    {"NVIDIA A100-SXM4-40GB", 19.5, 156.0, 312.0},
    {"NVIDIA A100 80GB PCIe", 19.5, 156.0, 312.0},
}};

}  // namespace

std::optional<double> dense_peak_tflops(std::string_view gpu_name, DType dtype, bool tf32) {
    const auto found = std::find_if(kPeaks.begin(), kPeaks.end(), [&](const GpuPeak& p) { return p.name == gpu_name; });
    if (found == kPeaks.end()) return std::nullopt;
    if (dtype != DType::fp32) return found->half;
    return tf32 ? found->tf32 : found->fp32;
}

}  // namespace sweetspot
