#include "kernels/model/checkpoint_weights.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "base/number_text.hpp"
#include "base/parallel_for.hpp"
#include "base/strict_json.hpp"
#include "kernels/model/checkpoint_error.hpp"
#include "kernels/model/config_reader.hpp"
#include "kernels/model/dtype.hpp"

namespace sweetspot {
namespace {

namespace fs = std::filesystem;

constexpr std::uintmax_t kMaxConfigBytes = 16 << 20;

std::string shape_text(const std::vector<std::int64_t>& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

std::string shape_summary(const ModelConfig& m) {
    std::ostringstream s;
    s << "n_layer = " << m.n_layer << ", n_embd = " << m.n_embd << ", n_head = " << m.n_head
      << ", vocab_size = " << m.vocab_size << ", n_positions = " << m.max_positions
      << ", layer_norm_epsilon = " << m.ln_eps;
    return s.str();
}

std::string read_small_file(const fs::path& path) {
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) throw CheckpointError(path.string() + ": cannot read: " + ec.message());
    if (size > kMaxConfigBytes)
        throw CheckpointError(path.string() + ": " + std::to_string(size) + " bytes is too large for a config.json");
    std::ifstream in(path, std::ios::binary);
    std::string text(static_cast<std::size_t>(size), '\0');
    if (!in.read(text.data(), static_cast<std::streamsize>(size)))
        throw CheckpointError(path.string() + ": cannot read: " + std::strerror(errno));
    return text;
}

// "a GPT-2 model of n_layer = 2, ..."
std::string model_summary(const ModelConfig& m) {
    return "a " + std::string(family_of(m).title) + " model of " + shape_summary(m);
}

void require_same_model(const ModelConfig& declared, const ModelConfig& model, const std::string& config_label) {
    const bool same = declared.family == model.family && declared.n_layer == model.n_layer &&
                      declared.n_embd == model.n_embd && declared.n_head == model.n_head &&
                      declared.vocab_size == model.vocab_size && declared.max_positions == model.max_positions &&
                      declared.ln_eps == model.ln_eps;
    if (same) return;
    std::ostringstream eps;
    eps << declared.ln_eps;
    throw CheckpointError(config_label + ": the checkpoint is " + model_summary(declared) + ", but model '" +
                          model.name + "' is " + model_summary(model) +
                          "; use a model of the checkpoint's family and shape (in a matrix: a [[models]] entry with "
                          "family = \"" + std::string(enum_name(declared.family)) + "\", layers = " +
                          std::to_string(declared.n_layer) + ", hidden = " + std::to_string(declared.n_embd) +
                          ", heads = " + std::to_string(declared.n_head) + ", vocab = " +
                          std::to_string(declared.vocab_size) + ", positions = " +
                          std::to_string(declared.max_positions) + ", ln_eps = " + eps.str() + ")");
}

template <class T>
T load(const std::byte* base, std::int64_t index) {
    T v;
    std::memcpy(&v, base + index * static_cast<std::int64_t>(sizeof(T)), sizeof(T));
    return v;
}

// dst[k] = element k of the tensor as our layout orders it; `value(i)` reads stored element i.
// Large tensors are split over the host's cores; each output element is written exactly once.
template <class Value>
void convert(std::span<float> dst, const std::vector<std::int64_t>& stored_shape, bool transpose, const Value& value) {
    const auto n = static_cast<std::int64_t>(dst.size());
    if (!transpose) {
        parallel_for(n, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t k = begin; k < end; ++k) dst[static_cast<std::size_t>(k)] = value(k);
        });
        return;
    }
    // Stored [in, out], wanted [out, in]: dst[o·in + i] = stored[i·out + o]. Walking dst in order
    // reads stored columns, whose neighbouring rows stay in cache for the next output row.
    const std::int64_t in = stored_shape[0], out = stored_shape[1];
    parallel_for(n, [&](std::int64_t begin, std::int64_t end) {
        std::int64_t o = begin / in, i = begin % in;
        for (std::int64_t k = begin; k < end; ++k) {
            dst[static_cast<std::size_t>(k)] = value(i * out + o);
            if (++i == in) {
                i = 0;
                ++o;
            }
        }
    });
}

}  // namespace

CheckpointFiles locate_checkpoint(const std::string& path) {
    const fs::path p(path);
    std::error_code ec;
    const auto status = fs::status(p, ec);
    if (path.empty() || !fs::exists(status))
        throw CheckpointError(path + ": no such file or directory (weights must be \"synthetic\", a .safetensors file, or a "
                                     "directory with config.json and model.safetensors or model.safetensors.index.json)");
    if (fs::is_directory(status)) {
        CheckpointFiles files{p / "model.safetensors", false, p / "config.json"};
        if (!fs::exists(files.tensors)) {
            files.tensors = p / "model.safetensors.index.json";
            files.sharded = true;
        }
        if (!fs::exists(files.tensors))
            throw CheckpointError(path + ": the directory has no model.safetensors and no model.safetensors.index.json");
        if (!fs::exists(*files.config)) throw CheckpointError(path + ": the directory has no config.json");
        return files;
    }
    CheckpointFiles files{p, false, std::nullopt};
    if (const auto beside = p.parent_path() / "config.json"; fs::exists(beside)) files.config = beside;
    return files;
}

CheckpointConfig checkpoint_config(std::string_view json_text, const std::string& label, const std::string& model_name) {
    const nlohmann::json config = parse_strict_json(json_text, label, "config.json");
    if (!config.is_object()) throw CheckpointError(label + ": config.json must be a JSON object");
    const ConfigReader r(config, label);
    const std::string expected = "expected one of: " + comma_list(known_model_types());
    if (r.find("model_type") == nullptr) r.fail("config.json has no \"model_type\", which names the model's family; " + expected);
    const std::string type = r.string("model_type", "");
    const std::optional<ModelFamily> family = family_of_model_type(type);
    if (!family) r.fail("model_type \"" + type + "\" names no family that can be loaded; " + expected);
    CheckpointConfig out = family_of(*family).parse_config(r, model_name);
    out.model.family = *family;
    return out;
}

std::optional<ModelConfig> checkpoint_model(const std::string& path) {
    const auto files = locate_checkpoint(path);
    // Checked first, so that a file that is no checkpoint at all is not reported as one without a
    // config.json. A sharded checkpoint is a directory, which has one.
    if (!files.sharded) require_safetensors_start(files.tensors);
    if (!files.config) return std::nullopt;
    return checkpoint_config(read_small_file(*files.config), files.config->string(), path).model;
}

Gpt2Weights::Gpt2Weights(std::span<const StoredTensor> tensors, const ModelConfig& model, const std::string& label,
                         bool tie_word_embeddings)
    : layout_(WeightLayout::for_model(model)) {
    const FamilyDecl& family = family_of(model);
    const std::string prefix(family.checkpoint_prefix);
    const auto fail = [&](const std::string& message) { return CheckpointError(label + ": " + message); };
    std::unordered_map<std::string_view, std::size_t> by_name;
    for (std::size_t i = 0; i < tensors.size(); ++i) by_name.emplace(tensors[i].name, i);
    std::vector<bool> used(tensors.size(), false);
    const auto exact = [&](const std::string& name) -> const StoredTensor* {
        const auto it = by_name.find(name);
        if (it == by_name.end()) return nullptr;
        used[it->second] = true;
        return &tensors[it->second];
    };
    // A whole model's checkpoint names the body under the family's prefix (GPT2LMHeadModel's
    // "transformer."), one of the body alone (GPT2Model) without it.
    const auto body = [&](const std::string& name) -> const StoredTensor* {
        const StoredTensor* prefixed = exact(prefix + name);
        const StoredTensor* bare = exact(name);
        if (prefixed != nullptr && bare != nullptr)
            throw fail("both '" + prefix + name + "' and '" + name + "' are present; which one is meant?");
        return prefixed != nullptr ? prefixed : bare;
    };

    for (const UnitLayout& unit : layout_.units) {
        auto& sources = sources_.emplace_back();
        const std::vector<TensorDecl> decls = family.unit_tensors(model, unit.kind, unit.block);
        for (std::size_t t = 0; t < unit.tensors.size(); ++t) {
            const TensorSpec& spec = unit.tensors[t];
            const int tensor = static_cast<int>(t);
            const bool tied_head = unit.kind == UnitKind::head && tensor == family.tied_head_tensor;
            const StoredTensor* stored = tied_head ? exact(spec.name) : body(spec.name);
            if (stored == nullptr && tied_head) {
                if (!tie_word_embeddings)
                    throw fail("there is no " + spec.name + ", and config.json unties it from " +
                               std::string(family.tied_head_source) + " (tie_word_embeddings = false)");
                stored = body(std::string(family.tied_head_source));
            }
            if (stored == nullptr)
                throw fail("missing tensor '" + prefix + spec.name + "' (or '" + spec.name + "') of model '" +
                           model.name + "'");
            const bool conv1d = decls[t].stored_transposed;
            const std::vector<std::int64_t> want = conv1d ? std::vector{spec.shape[1], spec.shape[0]} : spec.shape;
            if (stored->shape != want)
                throw fail("tensor '" + stored->name + "' has shape " + shape_text(stored->shape) + ", but model '" +
                           model.name + "' (" + shape_summary(model) + ") needs " + shape_text(want) +
                           (conv1d ? " (Conv1D weights are stored [in, out])" : ""));
            if (stored->type == StoredType::other)
                throw fail("tensor '" + stored->name + "' has dtype " + stored->dtype +
                           "; weights can be loaded from F32, F16 and BF16 only");
            sources.push_back({*stored, conv1d});
        }
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        if (used[i] || family.is_checkpoint_buffer(tensors[i].name)) continue;
        throw fail("unexpected tensor '" + tensors[i].name + "': not a parameter of a " + std::string(family.title) +
                   " model with " +
                   shape_summary(model) + " (is the checkpoint another model, or config.json not its own?)");
    }
}

void Gpt2Weights::fill_unit(int unit, std::span<float> out) const {
    if (unit < 0 || unit >= static_cast<int>(layout_.units.size()))
        throw std::invalid_argument("Gpt2Weights::fill_unit: no unit " + std::to_string(unit));
    const UnitLayout& u = layout_.units[static_cast<std::size_t>(unit)];
    if (static_cast<std::int64_t>(out.size()) != u.numel)
        throw std::invalid_argument("Gpt2Weights::fill_unit: unit " + std::to_string(unit) + " has " +
                                    std::to_string(u.numel) + " elements but the buffer has " + std::to_string(out.size()));
    std::int64_t filled_to = 0;  // everything before this is written; gaps up to the next tensor are padding
    for (std::size_t t = 0; t < u.tensors.size(); ++t) {
        const TensorSpec& spec = u.tensors[t];
        const Source& src = sources_[static_cast<std::size_t>(unit)][t];
        std::fill(out.begin() + filled_to, out.begin() + spec.offset, 0.0f);
        const auto dst = out.subspan(static_cast<std::size_t>(spec.offset), static_cast<std::size_t>(spec.numel));
        const std::byte* bytes = src.tensor.bytes.data();
        switch (src.tensor.type) {
            case StoredType::f32:
                if (!src.transpose) {
                    std::memcpy(dst.data(), bytes, dst.size_bytes());
                } else {
                    convert(dst, src.tensor.shape, true, [&](std::int64_t i) { return load<float>(bytes, i); });
                }
                break;
            case StoredType::f16:
                convert(dst, src.tensor.shape, src.transpose,
                        [&](std::int64_t i) { return fp16_bits_to_float(load<std::uint16_t>(bytes, i)); });
                break;
            case StoredType::bf16:
                convert(dst, src.tensor.shape, src.transpose,
                        [&](std::int64_t i) { return bf16_bits_to_float(load<std::uint16_t>(bytes, i)); });
                break;
            case StoredType::other: throw std::logic_error("Gpt2Weights: a tensor of an unsupported dtype was bound");
        }
        filled_to = spec.offset + spec.numel;
    }
    std::fill(out.begin() + filled_to, out.end(), 0.0f);
}

Gpt2Checkpoint Gpt2Checkpoint::open(const std::string& path, const ModelConfig& model) {
    const auto files = locate_checkpoint(path);
    bool tie = true;
    if (files.config) {
        // The model is compared first: a checkpoint of another model fails on it with the clearest message.
        const auto label = files.config->string();
        const auto declared = checkpoint_config(read_small_file(*files.config), label, path);
        require_same_model(declared.model, model, label);
        tie = declared.tie_word_embeddings;
    }
    auto tensors = files.sharded ? CheckpointTensors::open_sharded(files.tensors) : CheckpointTensors::open_file(files.tensors);
    Gpt2Weights weights(tensors.tensors(), model, files.tensors.string(), tie);
    return Gpt2Checkpoint(std::move(tensors), std::move(weights));
}

}  // namespace sweetspot
