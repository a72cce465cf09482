#pragma once
// The float64 reference of a training step's update: global gradient-norm clipping and AdamW
// (decoupled weight decay, bias-corrected moments, as torch.optim.AdamW), over fp64 master
// weights laid out as the model's units. The yardstick the host and GPU optimizers are checked
// against.
#include <vector>

#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

struct AdamWSettings {
    double lr = 3e-4;
    double beta1 = 0.9, beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.0;  // applied to matrices only (weight_layout.hpp's decays_weights)
};

// Per unit, laid out as the weights (WeightLayout offsets).
using UnitValues = std::vector<std::vector<double>>;

struct AdamWState {
    UnitValues m, v;  // first and second moments, zero before the first step
    int step = 0;     // steps taken
};

// What clipping multiplies every gradient by when their global L2 norm is `norm`; 1 for max_norm 0
// (no clipping).
double reference_clip_scale(double norm, double max_norm);

// Scales `grads` so their global L2 norm is at most max_norm (by max_norm / (norm + 1e-6), as
// torch.nn.utils.clip_grad_norm_; max_norm 0: not at all); returns the norm before clipping.
double reference_clip_gradients(UnitValues& grads, double max_norm);

// One AdamW step of `params` by `grads` (already clipped), advancing `state` (sized on the first
// step). Only the tensors' elements are touched: the padding between them stays as it is.
void reference_adamw_step(const WeightLayout& layout, UnitValues& params, const UnitValues& grads, AdamWState& state,
                          const AdamWSettings& settings);

}  // namespace sweetspot
