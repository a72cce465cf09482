#pragma once
// Hugging Face GPT-2 checkpoints, as GPT2LMHeadModel.save_pretrained writes them: config.json
// gives the shape, model.safetensors (or the shards model.safetensors.index.json names) the
// parameters. Each parameter is matched to its place in our WeightLayout and converted to fp32
// one unit at a time, straight from the mapped file.
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/model/checkpoint_tensors.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/model_family.hpp"
#include "kernels/model/safetensors.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

// `path` is a .safetensors file (a config.json beside it is used when there is one) or a
// directory holding config.json and either model.safetensors or a sharded checkpoint's
// model.safetensors.index.json. Where both are, model.safetensors is loaded, as transformers'
// from_pretrained does, so that both read the same weights. Throws CheckpointError when neither.
struct CheckpointFiles {
    std::filesystem::path tensors;  // the .safetensors file, or the index when `sharded`
    bool sharded = false;
    std::optional<std::filesystem::path> config;
};
CheckpointFiles locate_checkpoint(const std::string& path);

// What a config.json declares (`label` its file), for a model named `model_name`: its model_type
// picks the family (FamilyDecl::model_types), whose parser reads the rest. A config.json without a
// model_type, or with one no family has, is a CheckpointError naming the known ones.
CheckpointConfig checkpoint_config(std::string_view json_text, const std::string& label, const std::string& model_name);

// The model the checkpoint at `path` declares in its config.json (named after `path`), or
// nullopt when it has none. A tensors file that is not safetensors at all is a CheckpointError.
std::optional<ModelConfig> checkpoint_model(const std::string& path);

// The parameters of one GPT-2 model of shape `model` found among `tensors`, named as in
// GPT2LMHeadModel (with or without the "transformer." prefix). Conv1D weights are stored
// [in, out] and transposed into the layout's nn.Linear [out, in]. Attention-mask buffers are
// ignored; a missing, mis-shaped, non-float or unexpected tensor is a CheckpointError naming
// `label`. The tensors' bytes must outlive this object.
class Gpt2Weights {
public:
    Gpt2Weights(std::span<const StoredTensor> tensors, const ModelConfig& model, const std::string& label,
                bool tie_word_embeddings = true);

    const WeightLayout& layout() const { return layout_; }
    // Writes unit `unit` of layout() into `out` (unit.numel fp32 elements, padding zeroed).
    void fill_unit(int unit, std::span<float> out) const;

private:
    struct Source {
        StoredTensor tensor;
        bool transpose = false;  // stored [in, out], wanted [out, in]
    };
    WeightLayout layout_;
    std::vector<std::vector<Source>> sources_;  // [unit][tensor], in the layout's order
};

// A checkpoint on disk, mapped for as long as the object lives.
class Gpt2Checkpoint {
public:
    // Opens the checkpoint at `path` and checks it holds every parameter of `model`. When the
    // checkpoint has a config.json, its family and shape must be `model`'s (the cell names the
    // model; the file must be that model). Reads the header only; tensor bytes are read by fill_unit.
    static Gpt2Checkpoint open(const std::string& path, const ModelConfig& model);

    void fill_unit(int unit, std::span<float> out) const { weights_.fill_unit(unit, out); }

private:
    Gpt2Checkpoint(CheckpointTensors tensors, Gpt2Weights weights)
        : tensors_(std::move(tensors)), weights_(std::move(weights)) {}

    CheckpointTensors tensors_;  // weights_ points into its mappings, which a move does not relocate
    Gpt2Weights weights_;
};

}  // namespace sweetspot
