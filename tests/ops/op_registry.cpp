#include <iterator>

#include "op_entry.hpp"

namespace sweetspot::ops {

namespace {

std::vector<OpEntry> all_entries() {
    std::vector<OpEntry> entries;
    const auto add = [&entries](std::vector<OpEntry> family) {
        entries.insert(entries.end(), std::make_move_iterator(family.begin()), std::make_move_iterator(family.end()));
    };
    // Element-wise and row-wise ops (opsframe):
    add(embedding_ops());
    add(layernorm_ops());
    add(bias_ops());
    add(gelu_ops());
    add(residual_ops());
    add(dropout_ops());
    add(softmax_ops());
    add(count_nonfinite_ops());

    // Fused classifier (classop):
    add(classifier_ops());

    // Optimizer and gradient norm (classop):
    add(optimizer_ops());

    // Attention (flashbwd):
    add(attention_ops());

    // A linear layer's products and the training step's GEMM epilogues:
    add(gemm_ops());

    // LLaMA's ops:
    add(rmsnorm_ops());
    add(swiglu_ops());
    add(rope_ops());

    return entries;
}

}  // namespace

const std::vector<OpEntry>& op_entries() {
    static const std::vector<OpEntry> entries = all_entries();
    return entries;
}

}  // namespace sweetspot::ops
