#include "harness/matrix/matrix.hpp"

#include <toml++/toml.h>

#include "backends/backend_registry.hpp"
#include "base/checked_math.hpp"
#include "base/number_text.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/system/did_you_mean.hpp"
#include "kernels/model/model_fields.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <type_traits>
#include <variant>

// Every axis value is checked once, where it is written, and reduced to a normal form: the text
// CellParams spells it in (budget "12GiB" -> "12884901888", timeout "10m" -> "600"). Exclusions
// compare normal forms, so `prefetch = 2` excludes a sweep's `prefetch = "2"`, and cells are
// built from them, so a value that passed its check cannot fail later.

namespace sweetspot {

std::string escape_controls(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (const char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte >= 0x20 && byte != 0x7f) {
            out += c;
            continue;
        }
        switch (c) {
            case '\0': out += "\\0"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default: {
                char hex[5];
                std::snprintf(hex, sizeof hex, "\\x%02x", byte);
                out += hex;
            }
        }
    }
    return out;
}

namespace {

std::string position_text(const std::string& file, int line, int column) {
    if (line <= 0) return escape_controls(file);
    return escape_controls(file) + ":" + std::to_string(line) + ":" + std::to_string(column);
}

}  // namespace

// Messages quote keys, values and names from the file; escaping here, where every message
// passes, keeps a stray ESC or NUL from reaching the terminal whatever the message quotes.
MatrixError::MatrixError(std::string file, int line, int column, const std::string& message)
    : std::runtime_error(position_text(file, line, column) + ": error: " + escape_controls(message)),
      file_(std::move(file)),
      line_(line),
      column_(column),
      message_(escape_controls(message)) {}

namespace {

// ---- Message helpers ----

// A string as TOML would write it, so that messages show blanks, line breaks and control bytes.
std::string in_quotes(std::string_view s) {
    std::string out = "\"";
    for (const char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return escape_controls(out + "\"");
}

std::string type_name(toml::node_type type) {
    switch (type) {
        case toml::node_type::string: return "string";
        case toml::node_type::integer: return "integer";
        case toml::node_type::floating_point: return "float";
        case toml::node_type::boolean: return "boolean";
        case toml::node_type::date: return "date";
        case toml::node_type::time: return "time";
        case toml::node_type::date_time: return "date-time";
        case toml::node_type::array: return "array";
        case toml::node_type::table: return "table";
        case toml::node_type::none: break;
    }
    return "nothing";
}

// What was found, for "expected X, got Y": `string "two"`, `float 1.5`, `array`.
std::string describe(const toml::node& n) {
    if (n.is_array() || n.is_table()) return type_name(n.type());
    if (const auto* s = n.as_string()) return "string " + in_quotes(s->get());
    std::ostringstream text;
    n.visit([&](const auto& value) { text << value; });
    return type_name(n.type()) + " " + text.str();
}

// ---- Value checks: each returns the value it accepts or throws Invalid. ----

// A value that fails its check; the reader, which knows where it was written, turns it into
// a MatrixError at that position.
struct Invalid {
    std::string message;
};

std::string key_text(std::string_view key) { return "'" + std::string(key) + "'"; }

std::int64_t integer_at_least(std::string_view key, const toml::node& n, std::int64_t min, std::int64_t max) {
    const auto* v = n.as_integer();
    if (!v || v->get() < min) {
        throw Invalid{key_text(key) + " must be an integer >= " + std::to_string(min) + ", got " + describe(n)};
    }
    if (v->get() > max) {
        throw Invalid{key_text(key) + " = " + std::to_string(v->get()) + " is too large (at most " +
                      std::to_string(max) + ")"};
    }
    return v->get();
}

std::string any_string(std::string_view key, const toml::node& n) {
    const auto* s = n.as_string();
    if (!s) throw Invalid{key_text(key) + " must be a string, got " + describe(n)};
    return s->get();
}

bool has_control_byte(std::string_view s) {
    return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// Names and paths end up in the line-based canonical text of a cell, in a cell process's command
// line (where a NUL would cut them short) and on the terminal, hence one line, no control bytes.
std::string single_line_string(std::string_view key, const toml::node& n) {
    std::string s = any_string(key, n);
    if (s.empty() || has_control_byte(s)) {
        throw Invalid{key_text(key) + " must be a non-empty string on one line, got " + describe(n) +
                      (s.empty() ? "" : ", which has control characters")};
    }
    return s;
}

// ---- Models: the built-ins and the file's [[models]] ----

// A [[models]] entry's value of a field other than rope_scaling (MatrixReader::rope_scaling_text),
// checked, in the field's normal form (the cell text's).
std::string model_field_value(const ModelField& f, const toml::node& n) {
    return std::visit(
        [&](const auto& kind) -> std::string {
            using K = std::decay_t<decltype(kind)>;
            if constexpr (std::is_same_v<K, IntegerField>) {
                return std::to_string(integer_at_least(f.key, n, kind.min, kind.max));
            } else if constexpr (std::is_same_v<K, ChoiceField<ModelFamily>>) {
                const std::string text = single_line_string(f.key, n);
                if (const auto normal = normal_model_field(f, text)) return *normal;
                const std::vector<std::string> names = model_field_choices(f);
                throw Invalid{"unknown " + std::string(f.key) + " '" + text + "'" + suggestion(text, names) +
                              "; expected " + model_field_expects(f)};
            } else {
                const auto v = n.value<double>();  // integers convert too
                std::optional<std::string> normal;
                if (n.is_number() && v) normal = normal_model_field(f, format_number(*v));
                if (!normal) throw Invalid{key_text(f.key) + " must be " + model_field_expects(f) + ", got " + describe(n)};
                return *normal;
            }
        },
        f.kind);
}

std::vector<std::string> model_names(const std::vector<ModelConfig>& models) {
    std::vector<std::string> names;
    for (const auto& m : models) names.push_back(m.name);
    return names;
}

class ModelCatalog {
public:
    void add(ModelConfig model) { custom_.push_back(std::move(model)); }

    bool has_custom(std::string_view name) const {
        return std::any_of(custom_.begin(), custom_.end(), [&](const auto& m) { return m.name == name; });
    }

    // Throws Invalid, listing what exists, unless `name` is a built-in or custom model.
    void require(const std::string& name) const {
        if (has_custom(name) || find_builtin_model(name)) return;
        std::vector<std::string> all = model_names(builtin_models());
        const std::vector<std::string> custom = model_names(custom_);
        all.insert(all.end(), custom.begin(), custom.end());
        throw Invalid{"unknown model '" + name + "'" + suggestion(name, all) + "; built-in models: " +
                      comma_list(model_names(builtin_models())) +
                      "; custom models: " + (custom.empty() ? "none" : comma_list(custom))};
    }

    ModelConfig get(std::string_view name) const {
        for (const auto& m : custom_) {
            if (m.name == name) return m;
        }
        return find_builtin_model(name).value();
    }

private:
    std::vector<ModelConfig> custom_;
};

// ---- Axes: the keys a [defaults], [[sweep]] or exclusion may set (harness/matrix/axes.hpp) ----

// The index of each axis in axes(); an Assignment holds one value per axis in that order.
std::optional<std::size_t> axis_index(std::string_view name) {
    const Axis* axis = find_axis(name);
    if (!axis || !axis->in_matrix()) return std::nullopt;
    return static_cast<std::size_t>(axis - axes().data());
}

std::size_t index_of(std::string_view name) { return axis_index(name).value(); }

// A value as the matrix wrote it, checked against what the axis accepts, in normal form.
std::string normal_value(const Axis& axis, const toml::node& n, const ModelCatalog& models) {
    const auto must_be = [&] { return Invalid{key_text(axis.name) + " must be " + axis.expects + ", got " + describe(n)}; };
    std::string text;
    switch (axis.written) {
        case Axis::Written::integer:
            text = std::to_string(integer_at_least(axis.name, n, axis.min, axis.max));
            break;
        case Axis::Written::boolean:
            if (const auto* b = n.as_boolean()) text = b->get() ? "true" : "false";
            else throw must_be();
            break;
        case Axis::Written::text:
            text = single_line_string(axis.name, n);
            break;
        case Axis::Written::choice:
            text = single_line_string(axis.name, n);
            if (!axis.normalize(text)) {
                throw Invalid{"unknown " + std::string(axis.name) + " '" + text + "'" + suggestion(text, axis.choices) +
                              "; expected " + axis.expects};
            }
            break;
        case Axis::Written::model:
            text = single_line_string(axis.name, n);
            models.require(text);
            break;
        case Axis::Written::integer_or_string:
            if (const auto* i = n.as_integer()) text = std::to_string(i->get());
            else if (const auto* s = n.as_string()) text = s->get();
            else throw must_be();
            break;
        case Axis::Written::number_or_string:
            if (const auto* s = n.as_string()) text = s->get();
            else if (n.is_number()) text = format_number(*n.value<double>());
            else throw must_be();
            break;
        case Axis::Written::not_in_matrix:
            throw std::logic_error("axis '" + std::string(axis.name) + "' is not read from a matrix");
    }
    auto normal = axis.normalize(text);
    if (!normal) throw must_be();
    return std::move(*normal);
}

// ---- What the reader builds from the document ----

bool has_position(const toml::source_region& where) { return where.begin.line > 0; }

struct Value {
    std::string text;            // normal form
    toml::source_region where;   // no position for a built-in default
};

// The values one table gives one axis: one, or several for an array.
struct Setting {
    std::size_t axis;
    std::vector<Value> values;
};

struct Exclusion {
    std::vector<Setting> conditions;  // all must match; a condition matches any of its values
    toml::source_region where;
    int matched = 0;  // expanded cells it matched
};

struct Sweep {
    std::string name;
    toml::source_region where;
    std::vector<Setting> settings;  // in the order written: the first varies slowest
    std::vector<Exclusion> exclusions;
};

using Assignment = std::vector<Value>;  // one value per axis, indexed like axes() (matrix axes only used)

bool matches(const Exclusion& e, const Assignment& cell) {
    return std::all_of(e.conditions.begin(), e.conditions.end(), [&](const Setting& s) {
        return std::any_of(s.values.begin(), s.values.end(),
                           [&](const Value& v) { return v.text == cell[s.axis].text; });
    });
}

// Counts a match on every exclusion that matches, so that an exclusion shadowed by an earlier
// one is not reported as matching nothing.
bool mark_matches(std::vector<Exclusion>& exclusions, const Assignment& cell) {
    bool any = false;
    for (auto& e : exclusions) {
        if (matches(e, cell)) {
            ++e.matched;
            any = true;
        }
    }
    return any;
}

std::string exclusion_text(const Exclusion& e) {
    std::vector<std::string> parts;
    for (const auto& s : e.conditions) {
        std::vector<std::string> values;
        for (const auto& v : s.values) values.push_back(v.text);
        const std::string list = values.size() == 1 ? values[0] : "[" + comma_list(values) + "]";
        parts.push_back(std::string(axes()[s.axis].name) + " = " + list);
    }
    return "{ " + comma_list(parts) + " }";
}

// Calls visit(cell) for each combination of the settings' values over `base`, the first
// setting varying slowest.
template <class Visit>
void for_each_combination(const Assignment& base, const std::vector<Setting>& settings, Visit visit) {
    std::vector<std::size_t> index(settings.size(), 0);
    Assignment cell = base;
    while (true) {
        for (std::size_t i = 0; i < settings.size(); ++i) cell[settings[i].axis] = settings[i].values[index[i]];
        visit(cell);
        std::size_t i = settings.size();
        while (i > 0 && ++index[i - 1] == settings[i - 1].values.size()) index[--i] = 0;
        if (i == 0) return;
    }
}

// Cells a whole matrix may expand to, counted before exclusions and duplicates: a typo such as
// an extra list element in every axis, or many sweeps, must fail fast, not exhaust memory
// (`list` still shows this many quickly and in little memory: docs/benchmarks-history.md).
constexpr std::int64_t kMaxCells = 100000;

// Each cell is compared with every value of every exclusion that applies to it, so exclusions
// are bounded too: with kMaxCells, about 10^8 comparisons at most.
constexpr std::int64_t kMaxExclusionValues = 1000;

// The number of combinations of the settings' values; nothing when it does not fit an int64.
std::optional<std::int64_t> combination_count(const std::vector<Setting>& settings) {
    std::optional<std::int64_t> n = 1;
    for (const auto& s : settings) {
        if (n) n = try_mul(*n, static_cast<std::int64_t>(s.values.size()));
    }
    return n;
}

std::string count_text(std::optional<std::int64_t> n) {
    return n ? std::to_string(*n) : "more than " + std::to_string(std::numeric_limits<std::int64_t>::max());
}

// A key and its value, for walking a table in the order it was written (toml::table is
// ordered by name).
struct Entry {
    const toml::key* key;
    const toml::node* node;
};

std::vector<Entry> entries_in_file_order(const toml::table& t) {
    std::vector<Entry> entries;
    for (const auto& [k, v] : t) entries.push_back({&k, &v});
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.key->source().begin < b.key->source().begin; });
    return entries;
}

const std::vector<std::string> kTopLevelKeys = {"name", "description", "defaults", "models", "sweep", "exclude"};
// A [[models]] entry's keys: its name, the built-in it starts from, each model field's key.
std::vector<std::string> model_keys() {
    std::vector<std::string> keys = {"name", "base"};
    for (const ModelField& f : kModelFields) keys.emplace_back(f.key);
    return keys;
}

// rope_scaling's keys, config.json's but for original_max_position_embeddings, shortened as
// `positions` shortens max_position_embeddings.
const std::vector<std::string> kRopeScalingKeys = {"factor", "low_freq_factor", "high_freq_factor",
                                                   "original_max_positions"};

std::vector<std::string> sweep_keys() {
    std::vector<std::string> keys = {"name"};
    for (std::string& name : matrix_axis_names()) keys.push_back(std::move(name));
    keys.push_back("exclude");
    return keys;
}

// ---- The reader ----

class MatrixReader {
public:
    MatrixReader(std::string_view path, const std::vector<std::string>& overrides) : path_(path), overrides_(overrides) {}
    Matrix read(std::string_view text);

private:
    [[noreturn]] void fail(const toml::source_region& where, const std::string& message) const {
        throw MatrixError(path_, static_cast<int>(where.begin.line), static_cast<int>(where.begin.column), message);
    }

    // Runs a value check, placing its complaint at the node.
    template <class Check>
    auto checked(const toml::node& n, Check check) const {
        try {
            return check();
        } catch (const Invalid& e) {
            fail(n.source(), e.message);
        }
    }

    toml::table parse_toml(std::string_view text) const;
    void check_keys(const toml::table& t, const std::vector<std::string>& known, const std::string& where) const;
    std::vector<const toml::table*> tables(const toml::node* n, const std::string& key) const;
    std::optional<std::string> optional_name(const toml::table& t) const;

    void read_models(const toml::node* n);
    ModelConfig read_model(const toml::table& t) const;
    ModelConfig model_start(const toml::table& t, const std::string& name) const;
    std::string rope_scaling_text(const toml::node& n) const;

    void read_defaults(const toml::node* n);
    Sweep read_sweep(const toml::table& t, int number) const;
    std::vector<Exclusion> read_exclusions(const toml::node* n, const std::string& key, const std::string& where) const;
    Exclusion read_exclusion(const toml::table& t, const std::string& where) const;
    Setting read_setting(std::size_t axis, const toml::node& n) const;
    Value read_value(std::size_t axis, const toml::node& n) const;

    Setting read_override(const std::string& text) const;
    void require_bounded(const std::vector<Sweep>& sweeps) const;
    void expand(Sweep& sweep, Matrix& m);
    CellParams build_cell(const Assignment& cell, const Sweep& sweep) const;
    // Fails with `message` placed at the first of the axes `names` whose value the cell takes from
    // the file, else at the sweep; or, where --set gives one of them, naming that --set.
    [[noreturn]] void fail_at(const Assignment& cell, std::initializer_list<std::string_view> names, const Sweep& sweep,
                              const std::string& message) const;
    void apply_only_used_axes(CellParams& c, const Sweep& sweep, Matrix& m);
    void require_used(const Sweep& sweep, const std::set<BackendId>& backends) const;
    void require_matched(const std::vector<Exclusion>& exclusions, const std::string& scope) const;

    std::string path_;
    std::vector<std::string> overrides_;  // --set AXIS=VALUE[,VALUE...]
    std::map<std::size_t, std::string> overridden_;  // the axes --set gives, each with the --set that gives it
    ModelCatalog models_;
    Assignment defaults_;
    std::vector<Exclusion> global_exclusions_;
    std::set<std::string> seen_keys_;
    std::set<std::string> notes_;  // Matrix::notes already given
};

toml::table MatrixReader::parse_toml(std::string_view text) const {
    try {
        return toml::parse(text, std::string_view(path_));
    } catch (const toml::parse_error& e) {
        fail(e.source(), "invalid TOML: " + std::string(e.description()));
    }
}

void MatrixReader::check_keys(const toml::table& t, const std::vector<std::string>& known,
                              const std::string& where) const {
    for (const auto& [key, node] : entries_in_file_order(t)) {
        const std::string name(key->str());
        if (std::find(known.begin(), known.end(), name) != known.end()) continue;
        fail(key->source(), "unknown key '" + name + "' " + where + suggestion(name, known) +
                                "; known keys: " + comma_list(known));
    }
}

// The tables of an array of tables ([[key]] or key = [{...}]); none when the key is absent.
std::vector<const toml::table*> MatrixReader::tables(const toml::node* n, const std::string& key) const {
    if (!n) return {};
    const auto* array = n->as_array();
    if (!array) {
        fail(n->source(), key_text(key) + " must be an array of tables, such as [[" + key + "]] or " + key +
                              " = [ { ... } ], got " + describe(*n));
    }
    if (array->empty()) fail(n->source(), key_text(key) + " is an empty array; leave it out or give at least one table");
    std::vector<const toml::table*> out;
    for (const auto& element : *array) {
        const auto* t = element.as_table();
        if (!t) fail(element.source(), "each entry of " + key_text(key) + " must be a table, got " + describe(element));
        out.push_back(t);
    }
    return out;
}

std::optional<std::string> MatrixReader::optional_name(const toml::table& t) const {
    const toml::node* n = t.get("name");
    if (!n) return std::nullopt;
    return checked(*n, [&] { return single_line_string("name", *n); });
}

Matrix MatrixReader::read(std::string_view text) {
    const toml::table doc = parse_toml(text);
    check_keys(doc, kTopLevelKeys, "at the top level");
    Matrix m;
    m.path = path_;
    m.text = std::string(text);
    m.name = optional_name(doc).value_or(std::filesystem::path(path_).stem().string());
    if (const toml::node* d = doc.get("description")) m.description = checked(*d, [&] { return any_string("description", *d); });

    read_models(doc.get("models"));
    read_defaults(doc.get("defaults"));
    std::vector<Sweep> sweeps;
    for (const toml::table* t : tables(doc.get("sweep"), "sweep")) {
        sweeps.push_back(read_sweep(*t, static_cast<int>(sweeps.size()) + 1));
    }
    if (sweeps.empty()) {
        const toml::node* d = doc.get("defaults");
        sweeps.push_back({"defaults", d ? d->source() : doc.source(), {}, {}});
    }
    global_exclusions_ = read_exclusions(doc.get("exclude"), "exclude", "in [[exclude]]");
    // Each override replaces what every sweep (and [defaults]) says of its axis.
    for (const std::string& text : overrides_) {
        const Setting setting = read_override(text);
        // A second --set of an axis would silently replace the first, while the run records both.
        if (const auto [first, added] = overridden_.emplace(setting.axis, text); !added) {
            const std::string axis(axes()[setting.axis].name);
            throw std::invalid_argument("--set gives " + axis + " twice, '" + escape_controls(first->second) + "' and '" +
                                        escape_controls(text) + "'; give all its values in one, such as --set " + axis +
                                        "=V1,V2");
        }
        for (Sweep& sweep : sweeps) {
            std::erase_if(sweep.settings, [&](const Setting& s) { return s.axis == setting.axis; });
            sweep.settings.push_back(setting);
        }
        m.overrides.push_back(text);
    }

    require_bounded(sweeps);
    for (auto& sweep : sweeps) expand(sweep, m);
    // An override may leave an exclusion with nothing to exclude: that is no misspelling.
    if (overrides_.empty()) require_matched(global_exclusions_, "the matrix");
    return m;
}

// "AXIS=V1,V2": each value read as the TOML value it spells (1, 0.1, true), else as a string
// ("gpt2_small", "50%"), and checked as the matrix's own would be.
Setting MatrixReader::read_override(const std::string& text) const {
    const auto eq = text.find('=');
    const auto axis = eq == std::string::npos ? std::nullopt : axis_index(std::string_view(text).substr(0, eq));
    if (!axis || eq + 1 == text.size()) {
        const std::string name = eq == std::string::npos ? std::string() : text.substr(0, eq);
        throw std::invalid_argument("--set expects AXIS=VALUE[,VALUE...] with AXIS one of: " +
                                    comma_list(matrix_axis_names()) + "; got '" + escape_controls(text) + "'" +
                                    (axis ? std::string() : suggestion(name, matrix_axis_names())));
    }
    Setting setting{*axis, {}};
    std::istringstream list(text.substr(eq + 1));
    std::string piece;
    while (std::getline(list, piece, ',')) {
        toml::table parsed;
        try {
            parsed = toml::parse("v = " + piece, std::string_view("--set"));
        } catch (const toml::parse_error&) {
        }
        const toml::node* node = parsed.get("v");
        if (!node || node->is_array() || node->is_table()) {  // not one TOML value: the text itself
            parsed.insert_or_assign("v", piece);
            node = parsed.get("v");
        }
        try {
            setting.values.push_back({normal_value(axes()[*axis], *node, models_), {}});
        } catch (const Invalid& e) {
            throw std::invalid_argument("--set " + escape_controls(text) + ": " + e.message);
        }
    }
    if (setting.values.empty())
        throw std::invalid_argument("--set " + escape_controls(text) + ": give at least one value");
    return setting;
}

void MatrixReader::require_bounded(const std::vector<Sweep>& sweeps) const {
    std::int64_t values = 0;
    const auto count_values = [&](const std::vector<Exclusion>& exclusions) {
        for (const auto& e : exclusions) {
            for (const auto& condition : e.conditions) values += static_cast<std::int64_t>(condition.values.size());
            if (values > kMaxExclusionValues) {
                fail(e.where, "the exclusions up to this one name " + std::to_string(values) + " values, more than the " +
                                  std::to_string(kMaxExclusionValues) + " a matrix may have; narrow the sweeps instead");
            }
        }
    };
    for (const auto& sweep : sweeps) count_values(sweep.exclusions);
    count_values(global_exclusions_);

    // The cells of the file's own lists, without the axes --set gives: where these stay within the
    // bound, --set took the matrix past it, and the message names --set, not a line of the file.
    const auto file_count = [&](const Sweep& sweep) {
        std::vector<Setting> own;
        std::copy_if(sweep.settings.begin(), sweep.settings.end(), std::back_inserter(own),
                     [&](const Setting& s) { return !overridden_.contains(s.axis); });
        return combination_count(own);
    };
    const auto too_many = [&](const Sweep& sweep, bool the_file_alone, const std::string& what, const std::string& fix) {
        if (the_file_alone) fail(sweep.where, what + "; " + fix);
        std::vector<std::string> set_axes;
        for (const auto& [axis, text] : overridden_) set_axes.emplace_back(axes()[axis].name);
        throw std::invalid_argument("--set " + comma_list(set_axes) + ": " + what + "; give --set fewer values");
    };
    std::int64_t total = 0, file_total = 0;
    for (const auto& sweep : sweeps) {
        const auto count = combination_count(sweep.settings);
        const auto own = file_count(sweep);
        if (!count || *count > kMaxCells) {
            too_many(sweep, !own || *own > kMaxCells,
                     "sweep '" + sweep.name + "' expands to " + count_text(count) + " cells, more than the " +
                         std::to_string(kMaxCells) + " a matrix may have",
                     "split it or narrow its lists");
        }
        total += *count;  // each at most kMaxCells, so no overflow; nor of the file's own, each fewer
        file_total += *own;
        if (total > kMaxCells) {
            too_many(sweep, file_total > kMaxCells,
                     "the sweeps up to '" + sweep.name + "' expand to " + std::to_string(total) + " cells, more than the " +
                         std::to_string(kMaxCells) + " a matrix may have",
                     "split the matrix into several files or narrow its lists");
        }
    }
}

void MatrixReader::read_models(const toml::node* n) {
    for (const toml::table* t : tables(n, "models")) models_.add(read_model(*t));
}

ModelConfig MatrixReader::read_model(const toml::table& t) const {
    check_keys(t, model_keys(), "in [[models]]");
    const toml::node* name_node = t.get("name");
    if (!name_node) fail(t.source(), "a [[models]] entry needs a 'name'");
    const std::string name = *optional_name(t);
    if (find_builtin_model(name)) {
        fail(name_node->source(), "custom model '" + name + "' has the name of a built-in model; choose another name");
    }
    if (models_.has_custom(name)) fail(name_node->source(), "custom model '" + name + "' is defined twice");

    ModelConfig m = model_start(t, name);
    m.name = name;
    for (const ModelField& f : kModelFields) {
        const toml::node* v = t.get(f.key);
        if (!v) continue;
        const std::string normal = std::holds_alternative<RopeScalingField>(f.kind)
                                       ? rope_scaling_text(*v)
                                       : checked(*v, [&] { return model_field_value(f, *v); });
        set_model_field(f, m, normal);
    }
    if (const std::string why = m.validate(); !why.empty()) {
        fail(t.source(), "custom model is not a usable shape: " + why);
    }
    return m;
}

// The shape a custom model starts from: its base, or nothing, in which case the shape keys
// without a sensible default must be given.
ModelConfig MatrixReader::model_start(const toml::table& t, const std::string& name) const {
    if (const toml::node* base = t.get("base")) {
        return checked(*base, [&] {
            const std::string base_name = single_line_string("base", *base);
            auto m = find_builtin_model(base_name);
            const std::vector<std::string> builtins = model_names(builtin_models());
            if (!m) {
                throw Invalid{"unknown base model '" + base_name + "'" + suggestion(base_name, builtins) +
                              "; a base must be a built-in model: " + comma_list(builtins)};
            }
            return *m;
        });
    }
    for (const ModelField& f : kModelFields) {
        if (f.required && !t.get(f.key)) {
            fail(t.source(), "custom model '" + name + "' needs '" + std::string(f.key) +
                                 "' (or a 'base' built-in model to start from)");
        }
    }
    return ModelConfig{};
}

// rope_scaling: "off", or a table of Llama 3's four numbers, each checked where it is written; in
// the field's normal form.
std::string MatrixReader::rope_scaling_text(const toml::node& n) const {
    if (const auto* off = n.as_string(); off && off->get() == "off") return "off";
    const toml::table* t = n.as_table();
    if (!t) {
        fail(n.source(), "'rope_scaling' must be \"off\" or a table of " + comma_list(kRopeScalingKeys) +
                             " (Llama 3's scaling), got " + describe(n));
    }
    check_keys(*t, kRopeScalingKeys, "in rope_scaling");
    const auto entry = [&](const std::string& key) -> const toml::node& {
        const toml::node* v = t->get(key);
        if (!v) fail(t->source(), "'rope_scaling' needs '" + key + "': give all of " + comma_list(kRopeScalingKeys));
        return *v;
    };
    RopeScaling r;
    r.enabled = true;
    double* const reals[] = {&r.factor, &r.low_freq_factor, &r.high_freq_factor};  // kRopeScalingKeys' order
    for (std::size_t i = 0; i < std::size(reals); ++i) {
        const std::string& key = kRopeScalingKeys[i];
        const toml::node& v = entry(key);
        *reals[i] = checked(v, [&] {
            const auto number = v.value<double>();  // integers convert too
            if (!v.is_number() || !number || !(*number > 0))
                throw Invalid{key_text(key) + " must be a positive number, got " + describe(v)};
            return *number;
        });
    }
    const std::string& positions = kRopeScalingKeys.back();
    const toml::node& v = entry(positions);
    r.original_max_positions =
        static_cast<int>(checked(v, [&] { return integer_at_least(positions, v, 1, ModelLimits::positions); }));
    return r.text();
}

void MatrixReader::read_defaults(const toml::node* n) {
    for (const auto& axis : axes()) defaults_.push_back({axis.default_text, {}});
    if (!n) return;
    const toml::table* t = n->as_table();
    if (!t) fail(n->source(), "'defaults' must be a table ([defaults]), got " + describe(*n));
    check_keys(*t, matrix_axis_names(), "in [defaults]");
    for (const auto& [key, node] : entries_in_file_order(*t)) {
        if (node->is_array()) {
            fail(node->source(), "'" + std::string(key->str()) +
                                     "' in [defaults] must be a single value, got array; lists belong in a [[sweep]]");
        }
        const std::size_t axis = index_of(key->str());
        defaults_[axis] = read_value(axis, *node);
    }
}

Sweep MatrixReader::read_sweep(const toml::table& t, int number) const {
    check_keys(t, sweep_keys(), "in [[sweep]]");
    Sweep sweep;
    sweep.where = t.source();
    sweep.name = optional_name(t).value_or("sweep" + std::to_string(number));
    for (const auto& [key, node] : entries_in_file_order(t)) {
        if (const auto axis = axis_index(key->str())) sweep.settings.push_back(read_setting(*axis, *node));
    }
    sweep.exclusions = read_exclusions(t.get("exclude"), "exclude", "in an exclusion of sweep '" + sweep.name + "'");
    return sweep;
}

std::vector<Exclusion> MatrixReader::read_exclusions(const toml::node* n, const std::string& key,
                                                     const std::string& where) const {
    std::vector<Exclusion> out;
    for (const toml::table* t : tables(n, key)) out.push_back(read_exclusion(*t, where));
    return out;
}

Exclusion MatrixReader::read_exclusion(const toml::table& t, const std::string& where) const {
    check_keys(t, matrix_axis_names(), where);
    if (t.empty()) fail(t.source(), "an exclusion must name at least one key; an empty one would exclude every cell");
    Exclusion e;
    e.where = t.source();
    for (const auto& [key, node] : entries_in_file_order(t)) e.conditions.push_back(read_setting(index_of(key->str()), *node));
    return e;
}

Setting MatrixReader::read_setting(std::size_t axis, const toml::node& n) const {
    const auto* array = n.as_array();
    if (!array) return {axis, {read_value(axis, n)}};
    const std::string_view name = axes()[axis].name;
    if (array->empty()) fail(n.source(), key_text(name) + " is an empty array; give at least one value");
    Setting s{axis, {}};
    for (const auto& element : *array) {
        if (element.is_array()) {
            fail(element.source(), key_text(name) + " must be a value or an array of values, got a nested array");
        }
        s.values.push_back(read_value(axis, element));
    }
    return s;
}

Value MatrixReader::read_value(std::size_t axis, const toml::node& n) const {
    return {checked(n, [&] { return normal_value(axes()[axis], n, models_); }), n.source()};
}

void MatrixReader::expand(Sweep& sweep, Matrix& m) {
    int kept = 0;
    std::set<BackendId> backends;  // of the cells the exclusions keep
    for_each_combination(defaults_, sweep.settings, [&](const Assignment& cell) {
        const bool excluded_here = mark_matches(sweep.exclusions, cell);
        const bool excluded_globally = mark_matches(global_exclusions_, cell);
        if (excluded_here || excluded_globally) {
            ++m.excluded;
            return;
        }
        ++kept;
        CellParams c = build_cell(cell, sweep);
        backends.insert(c.backend);
        apply_only_used_axes(c, sweep, m);
        if (!seen_keys_.insert(c.key()).second) {
            ++m.duplicates;
            return;
        }
        m.cells.push_back(std::move(c));
    });
    if (kept == 0) {
        fail(sweep.where, "sweep '" + sweep.name + "' has no cells left: exclusions removed all " +
                              count_text(combination_count(sweep.settings)) + " of them");
    }
    if (overrides_.empty()) require_matched(sweep.exclusions, "sweep '" + sweep.name + "'");
    require_used(sweep, backends);
}

// The placement axes the cell's backend does not use (backend_registry.hpp) take their defaults, so
// that the same workload is not measured twice under two names; the matrix says so once per sweep.
void MatrixReader::apply_only_used_axes(CellParams& c, const Sweep& sweep, Matrix& m) {
    const BackendTraits& backend = backend_traits(c.backend);
    for (const Axis& axis : axes()) {
        // The backend axis picks the backend; the others of its role say how the backend places weights.
        if (axis.role != Axis::Role::placement || axis.name == "backend" || backend.uses(axis.name)) continue;
        if (axis.get(c) == axis.default_text) continue;
        const std::string note = "sweep '" + sweep.name + "': " + std::string(axis.name) + " has no effect on backend " +
                                 std::string(enum_name(c.backend)) + ", whose cells take the default (" +
                                 axis.default_text + ")";
        if (notes_.insert(note).second) m.notes.push_back(note);
        axis.set(c, axis.default_text);
    }
}

// A placement axis the sweep itself sets to other than its default, though none of its backends
// uses it, is a mistake to point at rather than a setting to drop.
void MatrixReader::require_used(const Sweep& sweep, const std::set<BackendId>& backends) const {
    for (const Setting& setting : sweep.settings) {
        const Axis& axis = axes()[setting.axis];
        if (axis.role != Axis::Role::placement || axis.name == "backend") continue;
        if (std::any_of(backends.begin(), backends.end(), [&](BackendId b) { return backend_traits(b).uses(axis.name); }))
            continue;
        for (const Value& v : setting.values) {
            if (!has_position(v.where) || v.text == axis.default_text) continue;
            std::vector<std::string> names, users;
            for (const BackendId b : backends) names.emplace_back(enum_name(b));
            for (const BackendTraits& b : backend_registry())
                if (b.uses(axis.name)) users.emplace_back(enum_name(b.id));
            fail(v.where, key_text(axis.name) + " = " + v.text + " has no effect on the " +
                              (names.size() == 1 ? "backend" : "backends") + " of sweep '" + sweep.name + "' (" +
                              comma_list(names) + "): remove it, or give the sweep a backend that uses it (" +
                              comma_list(users) + ")");
        }
    }
}

CellParams MatrixReader::build_cell(const Assignment& cell, const Sweep& sweep) const {
    CellParams c;
    c.sweep = sweep.name;
    for (std::size_t i = 0; i < axes().size(); ++i)
        if (axes()[i].in_matrix()) axes()[i].set(c, cell[i].text);
    c.model = models_.get(c.model.name);
    if (c.seq > c.model.max_positions) {
        // Blame the seq value, else (seq left at its default) the model that is too short.
        const Value& seq = cell[index_of("seq")];
        fail_at(cell, {"seq", "model"}, sweep,
                "'seq' = " + seq.text + " is longer than model '" + c.model.name + "' allows (" +
                    std::to_string(c.model.max_positions) + " positions)");
    }
    if (c.budget_bytes() < 1) {
        const Value& budget = cell[index_of("budget")];
        fail_at(cell, {"budget"}, sweep,
                "'budget' = " + budget.text + " of the " + std::to_string(c.weight_bytes()) + " weight bytes of model '" +
                    c.model.name + "' is less than a byte");
    }
    if (static_cast<std::int64_t>(c.batch) * c.seq > AxisLimits::tokens) {
        const Value& batch = cell[index_of("batch")];
        const Value& seq = cell[index_of("seq")];
        fail_at(cell, {"batch", "seq"}, sweep,
                "'batch' = " + batch.text + " with 'seq' = " + seq.text + " is " +
                    std::to_string(static_cast<std::int64_t>(c.batch) * c.seq) + " tokens per forward, more than the " +
                    std::to_string(AxisLimits::tokens) + " a cell may have");
    }
    return c;
}

void MatrixReader::fail_at(const Assignment& cell, std::initializer_list<std::string_view> names, const Sweep& sweep,
                           const std::string& message) const {
    // A value --set gave has no line in the file: its --set is to blame, wherever the other values come from.
    for (const std::string_view name : names)
        if (const auto set = overridden_.find(index_of(name)); set != overridden_.end())
            throw std::invalid_argument("--set " + escape_controls(set->second) + ": " + message);
    for (const std::string_view name : names)
        if (has_position(cell[index_of(name)].where)) fail(cell[index_of(name)].where, message);
    fail(sweep.where, message);
}

void MatrixReader::require_matched(const std::vector<Exclusion>& exclusions, const std::string& scope) const {
    for (const auto& e : exclusions) {
        if (e.matched > 0) continue;
        fail(e.where, "exclusion " + exclusion_text(e) + " matches no cell of " + scope +
                          "; is a value misspelled or left over from an earlier version of the sweep?");
    }
}

// fopen rather than ifstream: its failure reliably leaves the reason in errno.
struct FileCloser {
    void operator()(std::FILE* f) const { std::fclose(f); }
};

std::string read_file(const std::string& path) {
    const auto cannot_read = [&] { return MatrixError(path, 0, 0, std::string("cannot read matrix file: ") + std::strerror(errno)); };
    std::unique_ptr<std::FILE, FileCloser> f(std::fopen(path.c_str(), "rb"));
    if (!f) throw cannot_read();
    std::string text;
    char buf[1 << 16];
    while (const std::size_t n = std::fread(buf, 1, sizeof buf, f.get())) text.append(buf, n);
    if (std::ferror(f.get())) throw cannot_read();
    return text;
}

}  // namespace

Matrix parse_matrix(std::string_view text, std::string_view path_for_messages, const std::vector<std::string>& overrides) {
    return MatrixReader(path_for_messages, overrides).read(text);
}

Matrix load_matrix(const std::string& path, const std::vector<std::string>& overrides) {
    return parse_matrix(read_file(path), path, overrides);
}

namespace {

struct Filter {
    const Axis* axis;
    std::set<std::string> values;  // normal form, or as written when not a value of the axis
};

Filter parse_filter(const std::string& filter) {
    const auto eq = filter.find('=');
    const Axis* axis = eq == std::string::npos ? nullptr : find_axis(std::string_view(filter).substr(0, eq));
    if (!axis) {
        std::vector<std::string> names;
        for (const Axis& a : axes()) names.emplace_back(a.name);
        throw std::invalid_argument("--only expects AXIS=VALUE[,VALUE...] with AXIS one of: " + comma_list(names) +
                                    "; got '" + escape_controls(filter) + "'" +
                                    suggestion(std::string_view(filter).substr(0, filter.find('=')), names));
    }
    Filter f{axis, {}};
    std::istringstream list(filter.substr(eq + 1));
    std::string v;
    while (std::getline(list, v, ',')) f.values.insert(axis->normalize(v).value_or(v));
    return f;
}

// The distinct values `axis` has in `cells`, in the order they first appear.
std::vector<std::string> values_of(const std::vector<CellParams>& cells, const Axis& axis) {
    std::vector<std::string> values;
    std::set<std::string> seen;
    for (const auto& c : cells) {
        std::string v = axis.get(c);
        if (seen.insert(v).second) values.push_back(std::move(v));
    }
    return values;
}

// "1, 2 or 4"; the first twenty of a longer list and how many there are.
std::string listing(const std::vector<std::string>& values) {
    constexpr std::size_t kShown = 20;
    if (values.size() > kShown) {
        const std::vector<std::string> shown(values.begin(), values.begin() + kShown);
        return comma_list(shown) + ", ... (" + std::to_string(values.size()) + " values)";
    }
    if (values.size() == 1) return values.front();
    const std::vector<std::string> all_but_last(values.begin(), values.end() - 1);
    return comma_list(all_but_last) + " or " + values.back();
}

}  // namespace

void keep_only(Matrix& matrix, const std::vector<std::string>& filters) {
    if (filters.empty() || matrix.cells.empty()) return;
    for (std::size_t i = 0; i < filters.size(); ++i) {
        const auto [axis, wanted] = parse_filter(filters[i]);
        std::vector<CellParams> kept;
        for (const auto& c : matrix.cells) {
            if (wanted.count(axis->get(c))) kept.push_back(c);
        }
        if (kept.empty()) {
            throw std::invalid_argument("--only " + escape_controls(filters[i]) + " matches no cell; " +
                                        std::string(axis->name) +
                                        (i == 0 ? " in this matrix is " : " in the cells the --only filters before it keep is ") +
                                        escape_controls(listing(values_of(matrix.cells, *axis))));
        }
        matrix.cells = std::move(kept);
    }
}

std::string default_db_path(const Matrix& matrix) {
    constexpr std::size_t kMaxStem = 100;
    std::string stem;
    for (const char c : std::string_view(matrix.name).substr(0, kMaxStem)) {
        const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                          c == '_' || c == '-';
        stem += safe ? c : '_';
    }
    if (stem.empty()) stem = "matrix";
    if (stem.front() == '.') stem.front() = '_';  // neither hidden nor "." / ".."
    return "results/" + stem + ".db";
}

}  // namespace sweetspot
