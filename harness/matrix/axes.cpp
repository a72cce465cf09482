#include "harness/matrix/axes.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <set>

#include "base/number_text.hpp"
#include "kernels/model/model_fields.hpp"

namespace sweetspot {
namespace {

bool is_single_line(std::string_view s) {
    return !s.empty() &&
           std::none_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// The fields shared by every axis; the makers below fill in how values are read and written.
Axis axis_named(std::string_view name, Axis::Written written, Axis::Column column_type) {
    Axis a;
    a.name = name;
    a.written = written;
    a.column = name;
    a.column_type = column_type;
    return a;
}

Axis with_default(Axis a) {
    a.default_text = a.get(CellParams{});
    return a;
}

Axis::Column model_column_type(const ModelField& f) {
    if (f.column.empty()) return Axis::Column::none;
    if (std::holds_alternative<IntegerField>(f.kind)) return Axis::Column::integer;
    if (std::holds_alternative<RealField<float>>(f.kind) || std::holds_alternative<RealField<double>>(f.kind))
        return Axis::Column::real;
    return Axis::Column::text;
}

// The bounds, their message and the check of an integer axis.
void integer_range(Axis& a, std::int64_t min, std::int64_t max) {
    a.min = min;
    a.max = max;
    a.expects = "an integer from " + std::to_string(min) + " to " + std::to_string(max);
    a.normalize = [min, max](std::string_view text) -> std::optional<std::string> {
        const auto v = parse_integer(text);
        if (!v || *v < min || *v > max) return std::nullopt;
        return std::to_string(*v);
    };
}

template <class Int>
Axis integer_axis(std::string_view name, std::int64_t min, std::int64_t max, Int CellParams::*field) {
    Axis a = axis_named(name, Axis::Written::integer, Axis::Column::integer);
    a.unit = Unit::count;
    integer_range(a, min, max);
    a.get = [field](const CellParams& c) { return std::to_string(c.*field); };
    a.set = [field](CellParams& c, const std::string& v) { c.*field = static_cast<Int>(*parse_integer(v)); };
    return with_default(std::move(a));
}

// An axis whose value type parses and prints itself (V::parse, V::text): prefetch, budget.
template <class V>
Axis value_axis(std::string_view name, V CellParams::*field, std::string expects) {
    Axis a = axis_named(name, Axis::Written::integer_or_string, Axis::Column::text);
    a.expects = std::move(expects);
    a.normalize = [](std::string_view text) -> std::optional<std::string> {
        const auto v = V::parse(text);
        if (!v) return std::nullopt;
        return v->text();
    };
    a.get = [field](const CellParams& c) { return (c.*field).text(); };
    a.set = [field](CellParams& c, const std::string& v) { c.*field = *V::parse(v); };
    return with_default(std::move(a));
}

// The values of an axis that takes one of E's names.
template <class E>
void enum_values(Axis& a) {
    a.choices = enum_names<E>();
    a.expects = "one of: " + comma_list(a.choices);
    a.normalize = [](std::string_view text) -> std::optional<std::string> {
        if (!parse_enum<E>(text)) return std::nullopt;
        return std::string(text);
    };
}

template <class E>
Axis choice_axis(std::string_view name, E CellParams::*field) {
    Axis a = axis_named(name, Axis::Written::choice, Axis::Column::text);
    enum_values<E>(a);
    a.get = [field](const CellParams& c) { return std::string(enum_name(c.*field)); };
    a.set = [field](CellParams& c, const std::string& v) { c.*field = *parse_enum<E>(v); };
    return with_default(std::move(a));
}

Axis model_axis() {
    Axis a = axis_named("model", Axis::Written::model, Axis::Column::text);
    a.in_list = a.in_summary = Axis::Shown::always;
    a.expects = "a model name on one line";
    a.normalize = [](std::string_view text) -> std::optional<std::string> {
        if (!is_single_line(text)) return std::nullopt;
        return std::string(text);
    };
    a.get = [](const CellParams& c) { return c.model.name; };
    // The name only: the matrix reader brings the shape from its model catalogue, cell text from
    // its shape lines.
    a.set = [](CellParams& c, const std::string& v) { c.model.name = v; };
    return with_default(std::move(a));
}

// A line of the model's description in the cell text ("model.n_layer", kModelFields): not written
// in a matrix (the model's name brings it), but keyed, so redefining a custom model changes its
// cells' keys; the fields added after GPT-2's only where not at their default, so the cells of
// models that leave them alone keep their keys.
Axis model_field_axis(const ModelField& f) {
    Axis a = axis_named(f.axis, Axis::Written::not_in_matrix, model_column_type(f));
    a.column = f.column;
    a.keyed = f.keyed_always ? Axis::Keyed::always : Axis::Keyed::unless_default;
    a.in_list = a.in_summary = Axis::Shown::never;  // `list` prints each model's line below its table
    a.since = f.since;
    a.expects = model_field_expects(f);
    a.choices = model_field_choices(f);
    if (const auto* count = std::get_if<IntegerField>(&f.kind)) {
        a.unit = Unit::count;
        a.min = count->min;
        a.max = count->max;
    }
    a.normalize = [&f](std::string_view text) { return normal_model_field(f, text); };
    a.get = [&f](const CellParams& c) { return model_field_text(f, c.model); };
    a.set = [&f](CellParams& c, const std::string& v) { set_model_field(f, c.model, v); };
    if (const auto* count = std::get_if<IntegerField>(&f.kind); count != nullptr && count->zero_is != nullptr) {
        // The column holds the count in effect; a row from before it, the one its text gave, or
        // where its text has no line (0), `factor` times the other count's column.
        a.stored = [&f](const CellParams& c) { return std::to_string(*model_field_in_effect(f, c.model)); };
        const std::string other(model_field_of(count->zero_is).column);
        const std::string factor = std::to_string(count->factor);
        a.before_sql = [&f, other, factor](std::string_view prefix) {
            const std::string line = canonical_line_sql(std::string(prefix) + "canonical", f.axis);
            return "COALESCE(NULLIF(CAST(" + line + " AS INTEGER), 0), " + factor + " * " + std::string(prefix) + other + ")";
        };
    }
    return with_default(std::move(a));
}

Axis prefetch_axis() {
    return value_axis("prefetch", &CellParams::prefetch,
                      "\"off\", \"jit\" or a look-ahead depth from 1 to " + std::to_string(AxisLimits::prefetch_depth));
}

Axis budget_axis() {
    Axis a = value_axis("budget", &CellParams::budget,
                        "a byte count or a size such as \"12GiB\" or \"512MB\", from 1 byte to " +
                            std::to_string(AxisLimits::budget_bytes) +
                            " (8 PiB), or a percentage of the weights in (0%, 100%] such as \"50%\"");
    a.display = [](const CellParams& c) {
        return c.budget.kind == Budget::Kind::percent ? c.budget.text()
                                                      : human_bytes(static_cast<double>(c.budget_bytes()));
    };
    return a;
}

// A preset, or fusions and presets joined by '+' (their union); list shows what a preset stands for.
Axis variant_axis() {
    Axis a = axis_named("variant", Axis::Written::choice, Axis::Column::text);
    for (const auto& preset : kVariantPresets) a.choices.emplace_back(preset.name);
    std::string fusions;
    for (const std::string& f : enum_names<Fusion>()) fusions += (fusions.empty() ? "" : ", ") + f;
    a.expects = "a preset (" + comma_list(a.choices) + "), or fusions and presets joined by '+', each fusion once (" +
                fusions + ")";
    a.normalize = [](std::string_view text) -> std::optional<std::string> {
        const auto v = Variant::parse(text);
        if (!v) return std::nullopt;
        return v->text();
    };
    a.get = [](const CellParams& c) { return c.variant.text(); };
    a.set = [](CellParams& c, const std::string& v) { c.variant = *Variant::parse(v); };
    a.display = [](const CellParams& c) {
        const std::string name = c.variant.text(), fusions = c.variant.fusions_text();
        return c.variant.is_baseline() || name == fusions ? name : name + " (" + fusions + ")";
    };
    return with_default(std::move(a));
}

// A real number from `least` up to (not including) `below`, keyed only when not its default, so
// cells from before the axis keep their keys.
Axis real_axis(std::string_view name, double CellParams::*field, Unit unit, std::string expects, double least,
               double below) {
    Axis a = axis_named(name, Axis::Written::number_or_string, Axis::Column::real);
    a.unit = unit;
    a.keyed = Axis::Keyed::unless_default;
    a.expects = std::move(expects);
    a.normalize = [least, below](std::string_view text) -> std::optional<std::string> {
        const auto v = parse_finite_number(text);
        if (!v || *v < least || *v >= below) return std::nullopt;
        return format_number(*v);
    };
    a.get = [field](const CellParams& c) { return format_number(c.*field); };
    a.set = [field](CellParams& c, const std::string& v) { c.*field = *parse_finite_number(v); };
    return with_default(std::move(a));
}

// The probability of dropping an element at each of GPT-2's dropouts (embeddings, attention
// probabilities, both residual branches); 0 is eval mode.
Axis dropout_axis() {
    return real_axis("dropout", &CellParams::dropout, Unit::ratio, "a probability from 0 up to (not including) 1", 0,
                     1);
}

// The global gradient norm a training step clips to (torch.nn.utils.clip_grad_norm_'s max_norm),
// 0 for none.
Axis max_grad_norm_axis() {
    return real_axis("max_grad_norm", &CellParams::max_grad_norm, Unit::none,
                     "a gradient norm > 0 to clip to, or 0 for no clipping", 0,
                     std::numeric_limits<double>::infinity());
}

// A setting that is on or off, keyed only when on.
Axis flag_axis(std::string_view name, bool CellParams::*field) {
    Axis a = axis_named(name, Axis::Written::boolean, Axis::Column::integer);
    a.unit = Unit::flag;
    a.keyed = Axis::Keyed::unless_default;
    a.expects = "true or false";
    a.normalize = [](std::string_view text) -> std::optional<std::string> {
        if (text != "true" && text != "false") return std::nullopt;
        return std::string(text);
    };
    a.get = [field](const CellParams& c) { return std::string(c.*field ? "true" : "false"); };
    a.set = [field](CellParams& c, const std::string& v) { c.*field = v == "true"; };
    return with_default(std::move(a));
}

// How a cell draws its sequences' lengths (sequence_lengths.hpp), in LengthSpec's one text.
// Keyed only when not fixed, so the cells from before the axis keep their keys.
Axis lengths_axis() {
    Axis a = axis_named("lengths", Axis::Written::text, Axis::Column::text);
    a.keyed = Axis::Keyed::unless_default;
    a.expects = "one of " + std::string(kLengthSpecForms) + " (on one line)";
    a.normalize = [](std::string_view text) -> std::optional<std::string> {
        // A cell's text is one line per axis: a path with a line break could not be read back.
        if (!is_single_line(text)) return std::nullopt;
        const auto spec = LengthSpec::parse(text);
        if (!spec) return std::nullopt;
        return spec->text();
    };
    a.get = [](const CellParams& c) { return c.lengths.text(); };
    a.set = [](CellParams& c, const std::string& v) { c.lengths = *LengthSpec::parse(v); };
    return with_default(std::move(a));
}

Axis weights_axis() {
    Axis a = axis_named("weights", Axis::Written::text, Axis::Column::text);
    a.expects = "\"synthetic\" or the path of a .safetensors checkpoint, on one line";
    a.normalize = [](std::string_view text) -> std::optional<std::string> {
        if (!is_single_line(text)) return std::nullopt;
        return std::string(text);
    };
    a.get = [](const CellParams& c) { return c.weights; };
    a.set = [](CellParams& c, const std::string& v) { c.weights = v; };
    return with_default(std::move(a));
}

// A setting of how a cell is measured, not of what: not keyed, listed where cells differ in it,
// not in the summary's table.
Axis measurement_setting(std::string_view name, std::string_view column) {
    Axis a = axis_named(name, Axis::Written::number_or_string, Axis::Column::real);
    a.column = column;
    a.keyed = Axis::Keyed::no;
    a.in_list = Axis::Shown::when_varies;
    a.in_summary = Axis::Shown::never;
    return a;
}

// A duration in seconds ("90s", "10m", "1h" or a number) of at least `least`; 0 too where
// `zero_means` says what it means.
Axis seconds_axis(std::string_view name, std::string_view column, double least, double CellParams::*field,
                  const std::string& zero_means = "") {
    Axis a = measurement_setting(name, column);
    a.unit = Unit::s;
    a.expects = "a duration such as \"90s\", \"10m\" or \"1h\", or a number of seconds of at least " +
                format_number(least) + (zero_means.empty() ? "" : " (0: " + zero_means + ")");
    const bool zero_allowed = !zero_means.empty();
    a.normalize = [least, zero_allowed](std::string_view text) -> std::optional<std::string> {
        if (zero_allowed && parse_finite_number(text) == 0.0) return "0";
        const auto seconds = parse_duration_s(text);
        if (!seconds || !std::isfinite(*seconds) || *seconds < least) return std::nullopt;
        return format_number(*seconds);
    };
    a.get = [field](const CellParams& c) { return format_number(c.*field); };
    a.set = [field](CellParams& c, const std::string& v) { c.*field = *parse_finite_number(v); };
    return with_default(std::move(a));
}

// The noise criterion's threshold, a percentage.
Axis max_noise_axis() {
    Axis a = measurement_setting("max_noise", "max_noise_pct");
    a.unit = Unit::percent;
    a.expects = "a percentage >= 0 (2 or \"2%\"; 0: no noise criterion)";
    a.normalize = [](std::string_view text) -> std::optional<std::string> {
        if (!text.empty() && text.back() == '%') text.remove_suffix(1);
        const auto p = parse_finite_number(text);
        if (!p || *p < 0 || *p > 100) return std::nullopt;
        return format_number(*p);
    };
    a.get = [](const CellParams& c) { return format_number(c.max_noise_pct); };
    a.set = [](CellParams& c, const std::string& v) { c.max_noise_pct = *parse_finite_number(v); };
    return with_default(std::move(a));
}

Axis shown(Axis a, Axis::Shown in_list, Axis::Shown in_summary) {
    a.in_list = in_list;
    a.in_summary = in_summary;
    return a;
}

Axis keyed(Axis a, Axis::Keyed rule) {
    a.keyed = rule;
    return a;
}

Axis role(Axis a, Axis::Role role, std::string_view meaning) {
    a.role = role;
    a.meaning = meaning;
    return a;
}

// An integer that counts nothing.
Axis no_unit(Axis a) {
    a.unit = Unit::none;
    return a;
}

// An axis whose column a later schema version added; `before`: what the cells stored before it had,
// where that is not the axis's default.
Axis added_in(Axis a, int version, std::string before = "") {
    a.since = version;
    a.before = std::move(before);
    return a;
}

std::vector<Axis> make_axes() {
    using S = Axis::Shown;
    using K = Axis::Keyed;
    using R = Axis::Role;
    constexpr std::int64_t max_seed = std::numeric_limits<std::int64_t>::max();
    std::vector<Axis> all = {role(model_axis(), R::workload, "model name")};
    for (const ModelField& f : kModelFields) all.push_back(role(model_field_axis(f), R::workload, f.meaning));
    std::vector<Axis> rest = {
        role(shown(variant_axis(), S::always, S::always), R::workload, "fused-kernel variant"),
        role(shown(choice_axis("backend", &CellParams::backend), S::always, S::always), R::placement, "memory backend"),
        role(shown(choice_axis("dtype", &CellParams::dtype), S::always, S::always), R::workload, "compute dtype"),
        role(shown(integer_axis("batch", 1, AxisLimits::tokens, &CellParams::batch), S::always, S::always), R::workload,
             "sequences per iteration"),
        role(shown(integer_axis("seq", 1, ModelLimits::positions, &CellParams::seq), S::always, S::always), R::workload,
             "tokens per sequence; with lengths other than fixed, the longest a drawn length may be"),
        role(added_in(lengths_axis(), 26), R::workload,
             "how each sequence's length is drawn: fixed (seq), uniform, lognormal, zipf or a file's"),
        // Both give each sequence the same logits, but a padded batch also computes its padding rows.
        role(added_in(keyed(choice_axis("packing", &CellParams::packing), K::unless_default), 26), R::workload,
             "how a ragged batch lies in the activations: padded to its longest sequence, or packed back to back"),
        role(integer_axis("streams", 0, AxisLimits::streams, &CellParams::streams), R::placement,
             "copy or prefetch streams"),
        role(prefetch_axis(), R::placement, "prefetch: off, jit or a look-ahead depth in layers"),
        role(budget_axis(), R::placement, "device memory the weights may occupy"),
        role(choice_axis("activations", &CellParams::activations), R::placement,
             "where the GPU forward keeps its activations"),
        role(keyed(choice_axis("resident", &CellParams::resident), K::unless_default), R::placement,
             "which layers a budget keeps on the device"),
        role(keyed(choice_axis("evict", &CellParams::evict), K::unless_default), R::placement,
             "how the UVM backends evict a layer"),
        role(flag_axis("tf32", &CellParams::tf32), R::workload, "fp32 GEMMs on TF32 tensor cores"),
        // fp32's accuracy at TF32 tensor cores' speed: each product three TF32 products of the
        // operands' split halves (kernels/compute/tf32_split.cuh).
        role(added_in(flag_axis("split_tf32", &CellParams::split_tf32), 23), R::workload,
             "fp32 GEMMs as three TF32 products of split operands"),
        role(added_in(keyed(choice_axis("launch", &CellParams::launch), K::unless_default), 10), R::placement,
             "how the GPU forward enqueues a unit's kernels"),
        // How a training step uses the device's memory, not what it computes: every setting gives
        // the same gradients (kernels/model/recompute.hpp).
        role(added_in(keyed(choice_axis("recompute", &CellParams::recompute), K::unless_default), 19), R::placement,
             "what a training step's backward computes again instead of keeping it"),
        // Where a training step's AdamW keeps its master weights and moments and runs: on the GPU
        // beside the weights, or in host memory on the CPU cores (ZeRO-Offload), the gradients
        // crossing the link down and the new weights up. Every setting gives the same update
        // (kernels/compute/host_adamw.hpp).
        role(added_in(keyed(choice_axis("optimizer", &CellParams::optimizer), K::unless_default), 20), R::placement,
             "where a training step's AdamW keeps its state and runs: device or host memory"),
        // What a training step computes: with clipping its update waits for every gradient's norm;
        // without, a host update may start on a unit as soon as its gradient is done.
        role(added_in(max_grad_norm_axis(), 28), R::workload,
             "the global gradient norm a training step clips to; 0: no clipping"),
        role(added_in(dropout_axis(), 3), R::workload, "probability at each of GPT-2's dropouts"),
        role(choice_axis("mode", &CellParams::mode), R::workload, "inference or training"),
        role(weights_axis(), R::workload, "synthetic weights or a checkpoint's path"),
        // How long a cell is measured, not what is measured: neither is part of the key, so a cell
        // measured again with more iterations is the same cell with a longer history. Traced
        // iterations are: a cell that traces has the collector loaded while it is timed.
        role(keyed(shown(integer_axis("warmups", 0, AxisLimits::iterations, &CellParams::warmups), S::when_varies,
                         S::when_varies),
                   K::no),
             R::protocol, "untimed iterations first"),
        role(keyed(shown(integer_axis("iterations", 1, AxisLimits::iterations, &CellParams::iterations), S::when_varies,
                         S::when_varies),
                   K::no),
             R::protocol, "timed iterations"),
        role(integer_axis("trace_iterations", 0, AxisLimits::iterations, &CellParams::trace_iterations), R::protocol,
             "profiled iterations, after the timed ones"),
        // Cells before the noise criterion ran their iterations with none.
        role(added_in(max_noise_axis(), 7, "0"), R::protocol, "the noise criterion's threshold, percent"),
        role(added_in(shown(keyed(integer_axis("max_iterations", 0, AxisLimits::iterations, &CellParams::max_iterations),
                                  K::no),
                            S::when_varies, S::never),
                      7),
             R::protocol, "the most timed iterations the noise criterion may take"),
        // The noise criterion's time limit: no more timed iterations once they took this long.
        role(added_in(seconds_axis("max_time", "max_time_s", 0, &CellParams::max_time_s, "no limit"), 7), R::protocol,
             "the noise criterion's time limit, seconds"),
        role(no_unit(shown(integer_axis("seed", 0, max_seed, &CellParams::seed), S::when_varies, S::when_varies)),
             R::protocol,
             "seed of the synthetic weights and token ids"),
        role(added_in(keyed(shown(integer_axis("repeat", 1, AxisLimits::repeats, &CellParams::repeat), S::when_varies,
                                  S::when_varies),
                            K::unless_default),
                      3),
             R::protocol, "which repeat of the same measurement"),
        // Bounds the run, does not change it. Its column holds the timeout the cell ran under (a
        // run's --timeout replaces the matrix's).
        role(seconds_axis("timeout", "timeout_s", AxisLimits::min_timeout_s, &CellParams::timeout_s), R::limit,
             "the cell's timeout, seconds"),
        role(keyed(choice_axis("debug_fault", &CellParams::debug_fault), K::unless_default), R::limit,
             "injected failure for harness tests"),
    };
    std::move(rest.begin(), rest.end(), std::back_inserter(all));
    return all;
}

}  // namespace

const std::vector<Axis>& axes() {
    static const std::vector<Axis> list = make_axes();
    return list;
}

const Axis* find_axis(std::string_view name) {
    for (const Axis& a : axes())
        if (a.name == name) return &a;
    return nullptr;
}

std::vector<std::string> matrix_axis_names() {
    std::vector<std::string> names;
    for (const Axis& a : axes())
        if (a.in_matrix()) names.emplace_back(a.name);
    return names;
}

std::vector<const Axis*> axes_with_role(std::initializer_list<Axis::Role> roles) {
    std::vector<const Axis*> found;
    for (const Axis& a : axes())
        if (a.has_column() && std::find(roles.begin(), roles.end(), a.role) != roles.end()) found.push_back(&a);
    return found;
}

bool shows_axis(const Axis& axis, Axis::Shown rule, const std::vector<CellParams>& cells) {
    switch (rule) {
        case Axis::Shown::always: return true;
        case Axis::Shown::never: return false;
        case Axis::Shown::when_set:
            return std::any_of(cells.begin(), cells.end(), [&](const CellParams& c) { return axis.get(c) != axis.default_text; });
        case Axis::Shown::when_varies: {
            std::set<std::string> values;
            for (const auto& c : cells) {
                values.insert(axis.get(c));
                if (values.size() > 1) return true;
            }
            return false;
        }
    }
    return false;
}

}  // namespace sweetspot
