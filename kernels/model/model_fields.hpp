#pragma once
// A model's description fields, declared once: its shape, its norms' epsilon, its family, its
// grouped kv heads and MLP width, its rotary positions. Each field is a line of a cell's text (and
// so of its key), a key of a matrix file's [[models]] entries with its bounds, a phrase of `list`'s
// model line, and, where it has one, a `cells` column with the schema version that added it; the
// axis registry (harness/matrix/axes.cpp), the matrix reader, `list`, the schema and, through each
// database's `axes` table, the analysis all walk kModelFields.
#include <array>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kernels/model/model_config.hpp"

namespace sweetspot {

// A count: of layers, heads, rows, widths. A field that may be 0 lets that stand for `factor`
// times another count (n_kv_head 0: n_head; ffn_hidden 0: 4 · n_embd); its column holds the count
// in effect, so a query finds a GPT-2 model's heads among its kv heads.
struct IntegerField {
    int ModelConfig::*field;
    int min, max;
    int ModelConfig::*zero_is = nullptr;
    int factor = 1;
};

// A number from `min` to `max` (above `min` where `min_excluded`), kept as float or double.
template <class Real>
struct RealField {
    Real ModelConfig::*field;
    double min, max;
    bool min_excluded = false;
};

// One of E's names (base/named_enum.hpp).
template <class E>
struct ChoiceField {
    E ModelConfig::*field;
};

// Llama 3's rotary scaling: "off", or its four numbers (RopeScaling::text).
struct RopeScalingField {
    RopeScaling ModelConfig::*field;
};

using ModelFieldKind = std::variant<IntegerField, RealField<float>, RealField<double>, ChoiceField<ModelFamily>,
                                    RopeScalingField>;

struct ModelField {
    std::string_view axis;    // model.n_layer: its line of the cell text
    std::string_view key;     // layers: its key in [[models]]
    std::string_view column;  // n_layer: its `cells` column; empty: none
    ModelFieldKind kind;
    // A [[models]] entry without a `base` must give it: no default fits every model.
    bool required;
    // The fields GPT-2's models had from the start are lines of every cell's text; the later ones
    // only where not at their default, so the cells of models that leave them alone keep their keys.
    bool keyed_always;
    // Whether `list` names it for every model, or only where not at its default.
    bool listed_always;
    int since;  // the schema version that added its column
    std::string_view meaning;  // the axis table's line
    std::string_view phrase;   // `list`'s words, "{}" the value
};

inline constexpr std::array<ModelField, 11> kModelFields = {{
    {"model.n_layer", "layers", "n_layer", IntegerField{&ModelConfig::n_layer, 1, ModelLimits::layers}, true, true, true,
     2, "transformer blocks", "{} layers"},
    {"model.n_embd", "hidden", "n_embd", IntegerField{&ModelConfig::n_embd, 1, ModelLimits::hidden}, true, true, true, 2,
     "hidden size", "hidden {}"},
    {"model.n_head", "heads", "n_head", IntegerField{&ModelConfig::n_head, 1, ModelLimits::hidden}, true, true, true, 2,
     "attention heads", "{} heads"},
    {"model.vocab_size", "vocab", "vocab_size", IntegerField{&ModelConfig::vocab_size, 1, ModelLimits::vocab}, false,
     true, true, 2, "vocabulary", "vocab {}"},
    {"model.max_positions", "positions", "max_positions",
     IntegerField{&ModelConfig::max_positions, 1, ModelLimits::positions}, false, true, true, 2,
     "position-embedding rows", "{} positions"},
    {"model.ln_eps", "ln_eps", "",
     RealField<float>{&ModelConfig::ln_eps, ModelLimits::min_ln_eps, ModelLimits::max_ln_eps}, false, true, true, 2,
     "LayerNorm epsilon", "ln_eps {}"},
    {"model.family", "family", "family", ChoiceField<ModelFamily>{&ModelConfig::family}, false, false, true, 24,
     "model family: its tensors, checkpoints and block", "{} family"},
    {"model.n_kv_head", "kv_heads", "n_kv_head",
     IntegerField{&ModelConfig::n_kv_head, 0, ModelLimits::hidden, &ModelConfig::n_head, 1}, false, false, false, 25,
     "key and value heads (the text's 0: as many as heads)", "{} kv heads"},
    {"model.ffn_hidden", "ffn", "ffn_hidden",
     IntegerField{&ModelConfig::ffn_hidden, 0, 4 * ModelLimits::hidden, &ModelConfig::n_embd, 4}, false, false, false,
     25, "the MLP's width (the text's 0: 4 × hidden)", "ffn {}"},
    {"model.rope_theta", "rope_theta", "",
     RealField<double>{&ModelConfig::rope_theta, 0, std::numeric_limits<double>::infinity(), true}, false, false,
     false, 2, "rotary positions' base", "rope_theta {}"},
    {"model.rope_scaling", "rope_scaling", "", RopeScalingField{&ModelConfig::rope_scaling}, false, false, false, 2,
     "rotary positions' Llama 3 scaling", "rope_scaling ({})"},
}};

// The field's value in its normal form, the text a cell's line holds ("9.99999975e-06", "off").
std::string model_field_text(const ModelField& f, const ModelConfig& m);
// Every field's line, "model.n_layer=2 model.n_embd=64 ...", in kModelFields' order and normal
// form: what tells two models apart wherever their numbers can differ (the key of a reference
// computed for one).
std::string model_fields_text(const ModelConfig& m);
// `text` in the field's normal form, or nothing where it is no value of the field.
std::optional<std::string> normal_model_field(const ModelField& f, std::string_view text);
// Sets the field from its normal form (normal_model_field's output).
void set_model_field(const ModelField& f, ModelConfig& m, const std::string& normal);
// What the field takes, for messages: "an integer from 1 to 16384", "a positive number".
std::string model_field_expects(const ModelField& f);
// A choice field's names in the docs' order; empty for the other kinds.
std::vector<std::string> model_field_choices(const ModelField& f);
// The value as `list` says it: a float's shortest form (1e-05), the scaling's numbers by name.
std::string model_field_display(const ModelField& f, const ModelConfig& m);
// The count in effect of a field where 0 stands for another (n_kv_head 0: n_head); nothing for the
// other fields.
std::optional<int> model_field_in_effect(const ModelField& f, const ModelConfig& m);
// The field whose member is `field`, for a field's zero_is.
const ModelField& model_field_of(int ModelConfig::*field);

}  // namespace sweetspot
