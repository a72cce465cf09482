#pragma once
// `sweetspot logits`: the logits of given token ids, written as a .npy file so that any other
// implementation (transformers, a reference of one's own) can be compared with ours. The forward
// runs through the same cell machinery as a sweep, on any backend.
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "backends/backend.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/variant.hpp"

namespace sweetspot {

struct LogitsRequest {
    std::string model;                 // a built-in model; empty: the one the checkpoint's config.json declares
    std::string weights = "synthetic"; // or a checkpoint (a .safetensors file or a save_pretrained directory)
    std::vector<std::vector<std::int32_t>> tokens;  // sequences of equal length; none: random ids
    int batch = 1, seq = 16;           // shape of the random ids
    std::uint64_t seed = 1;            // of the random ids and of synthetic weights
    BackendId backend = BackendId::host;
    DType dtype = DType::fp32;
    Variant variant;                   // GPU backends' fused kernels; the host runs the baseline
    bool tf32 = false;
    bool split_tf32 = false;
    bool allow_oversubscription = false;
    std::string output;                // the .npy file
};

// The model a command runs: the built-in one named, else the shape of the checkpoint's config.json;
// throws std::invalid_argument when neither says.
ModelConfig resolve_model(const std::string& name, const std::string& weights);

// The sequences given with `option` as one [batch, seq] array; throws std::invalid_argument, naming
// the option, for a sequence of another length, or the id (a `noun`) outside the model's vocabulary.
std::vector<std::int32_t> flatten_sequences(const std::vector<std::vector<std::int32_t>>& sequences, std::size_t seq,
                                            const ModelConfig& model, const std::string& option, const std::string& noun);

// "464,2068,7586" (commas and/or spaces) → token ids; throws std::invalid_argument.
std::vector<std::int32_t> parse_token_list(std::string_view text);

// Runs one forward and writes its logits, float32 [batch, seq, vocab], to request.output; says
// what it wrote on `report`. Returns 0, or 1 without writing the file when the logits are not
// finite or the run's own numerical check (against the float64 reference or the host forward)
// failed; a file already at request.output is then left as it was. Bad input
// (unknown model, tokens outside the vocabulary, a backend that cannot run here) throws
// std::invalid_argument, a bad checkpoint CheckpointError.
int write_logits(const LogitsRequest& request, std::ostream& report);

}  // namespace sweetspot
