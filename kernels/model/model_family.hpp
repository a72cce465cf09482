#pragma once
// What is particular to a model family, declared in one value the generic code reaches through
// family_of: the tensors of each unit (their checkpoint names, shapes and synthetic
// initialisation) and how the family's checkpoints are read. Each family's entry lives in its own
// directory (gpt2/gpt2_family.cpp); model_family.cpp maps ModelFamily to it.
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/model/model_config.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

class ConfigReader;

// A normal initialiser: mean `mean`, standard deviation `std_dev`.
struct NormalInit {
    double std_dev = 0.0;
    float mean = 0.0f;
};

struct TensorDecl {
    std::string name;                 // its name in the family's checkpoints: "h.3.attn.c_attn.weight"
    std::vector<std::int64_t> shape;  // row-major [out, in] for matrices, as nn.Linear
    // Checkpoints store it [in, out] (GPT-2's Conv1D weights, x · W + b).
    bool stored_transposed = false;
    NormalInit init;
};

// What a checkpoint's config.json declares.
struct CheckpointConfig {
    ModelConfig model;
    bool tie_word_embeddings = true;  // the head's tied tensor is the embedding's unless stored
};

struct FamilyDecl {
    std::string_view title;        // "GPT-2", as messages name the family
    std::string_view description;  // one line
    // The tensors of a unit of `kind` (`block` its index for UnitKind::block); their order is the
    // unit's, and the index a tensor has in it is the one the family's blocks read it by.
    std::vector<TensorDecl> (*unit_tensors)(const ModelConfig& model, UnitKind kind, int block);
    // The values of config.json's model_type that name the family (transformers' names for it);
    // checkpoint_config picks the family by them.
    std::span<const std::string_view> model_types;
    // Reads the fields of a config.json of the family into a model named `model_name`. Settings
    // under which the family's reference computes another function than our forward are refused
    // with the reader's CheckpointError.
    CheckpointConfig (*parse_config)(const ConfigReader& config, const std::string& model_name);
    // Checkpoints may name every tensor but the tied head tensor with this prefix.
    std::string_view checkpoint_prefix;
    // Tensors checkpoints may hold that are no parameters (masks older exporters saved).
    bool (*is_checkpoint_buffer)(std::string_view name);
    // The MLP's inputs of the model's width F (ffn_width): one for GPT-2's GELU MLP, two (gate and
    // up) for a gated one; and whether positions enter as rotations of q and k (rope) rather than
    // as an embedding. The activations' layout (activation_layout.hpp) reads both.
    int mlp_inputs;
    bool rotary;
    // The embedding unit's tables a batch's rows are read from: the token table, and the position
    // table (-1 where there is none, positions entering as rotations). A prefix check samples the
    // rows its tokens and positions touch.
    int token_table;
    int position_table;
    // The head tensor (its index in the head unit) that a checkpoint may leave out when tied to a
    // body tensor, and that body tensor's name.
    int tied_head_tensor;
    std::string_view tied_head_source;
};

const FamilyDecl& family_of(ModelFamily family);

// What follows "<prefix><blocks><index>" in a checkpoint's tensor name (prefix optional, as
// checkpoints of the bare body omit it): ".attn.bias" of "transformer.h.3.attn.bias" with prefix
// "transformer." and blocks "h."; empty when the name is no block tensor's.
inline std::string_view after_block_index(std::string_view name, std::string_view prefix, std::string_view blocks) {
    if (name.starts_with(prefix)) name.remove_prefix(prefix.size());
    if (!name.starts_with(blocks)) return {};
    name.remove_prefix(blocks.size());
    const auto digits = name.find_first_not_of("0123456789");
    if (digits == 0 || digits == std::string_view::npos) return {};
    return name.substr(digits);
}

// A unit's `count` tensor declarations in the order of its family's tensor enum: fill(at) calls
// at(index, name, shape, init[, stored_transposed]) once per tensor. Throws std::logic_error
// naming `who` when an index is left undeclared.
template <class Fill>
std::vector<TensorDecl> declare_tensors(const char* who, int count, Fill fill) {
    std::vector<TensorDecl> decls(static_cast<std::size_t>(count));
    const auto at = [&](int index, std::string name, std::vector<std::int64_t> shape, NormalInit init,
                        bool transposed = false) {
        decls[static_cast<std::size_t>(index)] = {std::move(name), std::move(shape), transposed, init};
    };
    fill(at);
    for (const TensorDecl& d : decls) {
        if (d.name.empty()) throw std::logic_error(std::string(who) + ": a tensor of the enum is not declared");
    }
    return decls;
}
inline const FamilyDecl& family_of(const ModelConfig& model) { return family_of(model.family); }
// The family one of whose model_types is `model_type`, or nothing.
std::optional<ModelFamily> family_of_model_type(std::string_view model_type);
// Every family's model_types, in the families' order.
std::vector<std::string> known_model_types();

}  // namespace sweetspot
