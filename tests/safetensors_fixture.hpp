#pragma once
// Writes safetensors files and Hugging Face GPT-2 checkpoints for the checkpoint tests, from
// tensors the test controls byte for byte (so malformed files are as easy to make as good ones).
// Independent of the reader under test: the JSON is put together by hand.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/model/dtype.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot::test {

struct FixtureTensor {
    std::string name;
    std::string dtype;                // "F32", "F16", "BF16", or anything a malformed case needs
    std::vector<std::int64_t> shape;
    std::string bytes;                // the stored data, little-endian
    // Byte range in the data section; by default tensors are laid out back to back in order.
    std::optional<std::pair<std::uint64_t, std::uint64_t>> offsets;
};

// fp32 values stored as `dtype` (F32, F16 or BF16), rounded to nearest even.
inline std::string encode(const std::vector<float>& values, const std::string& dtype) {
    std::string out;
    for (const float v : values) {
        if (dtype == "F32") {
            char b[4];
            std::memcpy(b, &v, 4);
            out.append(b, 4);
        } else {
            const std::uint16_t h = dtype == "F16" ? float_to_fp16_bits(v) : float_to_bf16_bits(v);
            out += static_cast<char>(h & 0xFF);
            out += static_cast<char>(h >> 8);
        }
    }
    return out;
}

// Fills in each tensor's default byte range (back to back, in order).
inline void assign_offsets(std::vector<FixtureTensor>& tensors) {
    std::uint64_t at = 0;
    for (auto& t : tensors) {
        if (!t.offsets) t.offsets = {at, at + t.bytes.size()};
        at += t.bytes.size();
    }
}

// Lays the tensors out back to back in their order, whatever offsets they had; `data` becomes
// their bytes in that order.
inline void lay_out(std::vector<FixtureTensor>& tensors, std::string& data) {
    data.clear();
    for (auto& t : tensors) {
        t.offsets = {data.size(), data.size() + t.bytes.size()};
        data += t.bytes;
    }
}

// The JSON header; tensors must have their offsets assigned. Padded with spaces to a multiple of
// 8 bytes, as the reference writer does.
inline std::string safetensors_header(const std::vector<FixtureTensor>& tensors, const std::string& metadata = "") {
    std::string h = "{";
    if (!metadata.empty()) h += "\"__metadata__\":" + metadata + ",";
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const auto& t = tensors[i];
        h += (i ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
        for (std::size_t d = 0; d < t.shape.size(); ++d) h += (d ? "," : "") + std::to_string(t.shape[d]);
        h += "],\"data_offsets\":[" + std::to_string(t.offsets->first) + "," + std::to_string(t.offsets->second) + "]}";
    }
    h += "}";
    h.append((8 - h.size() % 8) % 8, ' ');
    return h;
}

inline std::string length_prefix(std::uint64_t n) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
    return s;
}

// A whole file: the header length, the header, then each tensor's bytes in order.
inline std::string safetensors_file(std::vector<FixtureTensor> tensors, const std::string& metadata = "") {
    assign_offsets(tensors);
    const std::string header = safetensors_header(tensors, metadata);
    std::string file = length_prefix(header.size()) + header;
    for (const auto& t : tensors) file += t.bytes;
    return file;
}

struct Gpt2FixtureOptions {
    std::string dtype = "F32";
    bool prefix = true;           // "transformer." in front of the body's names, as GPT2LMHeadModel saves them
    bool lm_head = false;         // store lm_head.weight (else it is tied to wte)
    bool attention_buffers = false;  // the h.N.attn.bias / masked_bias buffers older transformers saved
};

// The GPT-2 tensors of `units` (fp32, laid out by `layout`) as GPT2LMHeadModel names and stores
// them: Conv1D weights transposed to [in, out].
inline std::vector<FixtureTensor> gpt2_tensors(const WeightLayout& layout, const std::vector<std::vector<float>>& units,
                                               const Gpt2FixtureOptions& o = {}) {
    std::vector<FixtureTensor> tensors;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        const UnitLayout& unit = layout.units[u];
        for (std::size_t t = 0; t < unit.tensors.size(); ++t) {
            const TensorSpec& spec = unit.tensors[t];
            const float* src = units[u].data() + spec.offset;
            const bool lm_head = unit.kind == UnitKind::head && static_cast<int>(t) == gpt2::head_tensor::lm_head;
            if (lm_head && !o.lm_head) continue;
            const bool conv1d = unit.kind == UnitKind::block &&
                                (spec.name.ends_with("c_attn.weight") || spec.name.ends_with("c_proj.weight") ||
                                 spec.name.ends_with("c_fc.weight"));
            std::vector<float> values(src, src + spec.numel);
            std::vector<std::int64_t> shape = spec.shape;
            if (conv1d) {
                const std::int64_t rows = spec.shape[0], cols = spec.shape[1];
                for (std::int64_t r = 0; r < rows; ++r)
                    for (std::int64_t c = 0; c < cols; ++c) values[static_cast<std::size_t>(c * rows + r)] = src[r * cols + c];
                shape = {cols, rows};
            }
            const std::string name = (o.prefix && !lm_head ? "transformer." : "") + spec.name;
            tensors.push_back({name, o.dtype, shape, encode(values, o.dtype), std::nullopt});
            if (o.attention_buffers && spec.name.ends_with("ln_1.weight")) {
                const std::string block = name.substr(0, name.size() - std::string("ln_1.weight").size());
                tensors.push_back({block + "attn.bias", "U8", {1, 1, 2, 2}, std::string("\1\0\1\1", 4), std::nullopt});
                tensors.push_back({block + "attn.masked_bias", "F32", {}, encode({-1e4f}, "F32"), std::nullopt});
            }
        }
    }
    return tensors;
}

// config.json as save_pretrained writes it for GPT-2 (the fields that matter, plus a few that do not).
inline std::string gpt2_config_json(const ModelConfig& m, const std::string& extra = "") {
    char eps[32];
    std::snprintf(eps, sizeof eps, "%.9g", static_cast<double>(m.ln_eps));
    return "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n  \"activation_function\": \"gelu_new\",\n"
           "  \"n_layer\": " + std::to_string(m.n_layer) + ",\n  \"n_embd\": " + std::to_string(m.n_embd) +
           ",\n  \"n_head\": " + std::to_string(m.n_head) + ",\n  \"vocab_size\": " + std::to_string(m.vocab_size) +
           ",\n  \"n_positions\": " + std::to_string(m.max_positions) + ",\n  \"n_ctx\": " +
           std::to_string(m.max_positions) + ",\n  \"layer_norm_epsilon\": " + eps +
           ",\n  \"n_inner\": null,\n  \"resid_pdrop\": 0.1,\n  \"task_specific_params\": {\"text-generation\": {\"do_sample\": true}}" +
           extra + "\n}\n";
}

}  // namespace sweetspot::test
