#pragma once
// The optimizer step on the host, for training whose optimizer state does not live on the GPU
// (ZeRO-Offload's CPU Adam): AdamW over fp32 master weights and moments in host memory, from the
// gradient as the GPU computed it (in the cell's dtype, copied to host memory), writing the new
// master weights, the moments and the weights in the dtype that the streaming backend copies to
// the GPU. The arithmetic is gpu::launch_adamw's and cpu::adamw's, line for line, so the three
// give the same bits; one pass over the five arrays, split over the host's cores, each chunk a
// branch-free loop the compiler vectorises (fp32 and bf16; fp16's conversion is a call).
#include <cstdint>
#include <span>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/model/dtype.hpp"

namespace sweetspot {

// The update of several tensors of one unit, each at its offset (in elements) into the five
// arrays with its own settings, in one pass split over the cores: the cores part once per unit,
// not once per tensor, so only the unit's last chunks leave some of them idle. `weights` and
// `gradient` are in `dtype` (float, or fp16 / bf16 bits); `master` is the fp32 copy below fp32,
// and null for fp32, whose `weights` are then the master. The gradient carries the loss scale and
// clipping that each tensor's `a.grad_scale` undoes, as on the GPU. Elements between the tensors
// are not touched.
struct HostAdamwTensor {
    std::int64_t offset = 0, numel = 0;
    cpu::AdamW a;
};
void host_adamw(DType dtype, void* weights, float* master, const void* gradient, float* m, float* v,
                std::span<const HostAdamwTensor> tensors);
// One tensor of n elements.
void host_adamw(DType dtype, void* weights, float* master, const void* gradient, float* m, float* v, std::int64_t n,
                const cpu::AdamW& a);

}  // namespace sweetspot
