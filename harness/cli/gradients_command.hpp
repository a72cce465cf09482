#pragma once
// `sweetspot gradients`: the loss of given token ids and targets, its gradient for every
// parameter, and the weights after one training step (global gradient-norm clipping at 1.0 and
// AdamW as a training cell runs them), from the float64 reference (kernels/compute/
// reference_gradients, reference_optimizer), written as .npy files so that another
// implementation (PyTorch autograd and torch.optim.AdamW: tests/check_transformers_gradients.py)
// can be compared with ours.
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace sweetspot {

struct GradientsRequest {
    std::string model;                  // a built-in model; empty: the checkpoint's config.json
    std::string weights = "synthetic";  // or a checkpoint (a .safetensors file or a save_pretrained directory)
    std::vector<std::vector<std::int32_t>> tokens, targets;  // one sequence each, all of one length
    float dropout = 0.0f;               // GPT-2's dropouts, with the masks every path draws
    std::uint64_t seed = 1;             // of synthetic weights and of the dropout masks
    float weight_decay = 0.0f;          // AdamW's, on the matrices only (decays_weights)
    float max_grad_norm = 1.0f;         // the global norm the gradients are clipped to; 0: none
    std::string output;                 // a folder, created
};

// Writes OUTPUT/loss.npy (float64 [1], the mean cross-entropy over the targets) and, for every
// tensor of the layout, OUTPUT/<its GPT-2 name>.npy (its gradient) and OUTPUT/updated/<its GPT-2
// name>.npy (its value after the step, with a training cell's TrainSettings but the given weight
// decay and clipping), float64, our [out, in] layout, lm_head apart from wte (untied), into a folder made
// beside OUTPUT and renamed to it when complete. Says what
// it wrote on `report`. Bad input (an unknown model, token ids or targets outside the vocabulary,
// sequences of unequal length, an OUTPUT that exists) throws std::invalid_argument, a bad
// checkpoint CheckpointError.
int write_gradients(const GradientsRequest& request, std::ostream& report);

}  // namespace sweetspot
