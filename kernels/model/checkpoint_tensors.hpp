#pragma once
// The tensors of a checkpoint, from one safetensors file or from the shards a Hugging Face
// model.safetensors.index.json names, with every file mapped for as long as the object lives.
#include <filesystem>
#include <span>
#include <vector>

#include "kernels/model/safetensors.hpp"

namespace sweetspot {

class CheckpointTensors {
public:
    // The tensors of one .safetensors file (see parse_safetensors).
    static CheckpointTensors open_file(const std::filesystem::path& file);

    // The tensors of every shard the index at `index` names, files beside it, as one set. Throws
    // CheckpointError naming the index or the shard when the index is not JSON of the form
    // {"metadata": {"total_size": N}, "weight_map": {tensor: shard}} (metadata optional), a
    // shard's name is not a plain file name, a shard is missing or not safetensors, a tensor is
    // in two shards, in a shard the index does not map it to or in no shard the index names, or
    // total_size is not the tensors' bytes.
    static CheckpointTensors open_sharded(const std::filesystem::path& index);

    // Spans into the mappings: valid while this object lives, moves included.
    std::span<const StoredTensor> tensors() const { return tensors_; }

private:
    CheckpointTensors() = default;

    std::vector<MappedFile> files_;  // moving a MappedFile does not move its mapping
    std::vector<StoredTensor> tensors_;
};

}  // namespace sweetspot
