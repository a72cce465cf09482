#include "harness/matrix/cell.hpp"

#include "backends/backend_registry.hpp"
#include "base/checked_math.hpp"
#include "harness/matrix/axes.hpp"
#include "kernels/model/weight_layout.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <stdexcept>
#include <utility>

namespace sweetspot {
namespace {

std::string trim(std::string_view s) {
    const auto b = s.find_first_not_of(" \t");
    if (b == std::string_view::npos) return {};
    const auto e = s.find_last_not_of(" \t");
    return std::string(s.substr(b, e - b + 1));
}

// A non-negative decimal number as written, digits · 10^exponent, so that sizes and percentages
// are resolved in integers: in doubles 2.01 · 1000 is 2009.99..., one byte short of "2.01KB".
struct Decimal {
    std::int64_t digits = 0;
    int exponent = 0;
};

// "12", "1.5", ".5", "1e-05" (as format_number writes small numbers). At most 18 significant
// digits, which fit an int64 exactly.
std::optional<Decimal> parse_decimal(std::string_view s) {
    Decimal d;
    int significant = 0;
    bool any_digit = false, after_point = false;
    std::size_t i = 0;
    for (; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '.' && !after_point) {
            after_point = true;
            continue;
        }
        if (c < '0' || c > '9') break;
        any_digit = true;
        if (d.digits == 0 && c == '0') {
            if (after_point) --d.exponent;
            continue;
        }
        if (++significant > 18) return std::nullopt;
        d.digits = d.digits * 10 + (c - '0');
        if (after_point) --d.exponent;
    }
    if (!any_digit) return std::nullopt;
    if (i < s.size()) {
        if (s[i] != 'e' && s[i] != 'E') return std::nullopt;
        std::string_view e = s.substr(i + 1);
        if (!e.empty() && e.front() == '+') e.remove_prefix(1);
        const auto shift = parse_integer(e);
        if (!shift || *shift < -400 || *shift > 400) return std::nullopt;
        d.exponent += static_cast<int>(*shift);
    }
    return d;
}

// floor(d · numerator / denominator), computed exactly; nothing when it does not fit an int64.
// With numerator < 2^63 and denominator ≤ 100, every intermediate fits in 128 bits.
std::optional<std::int64_t> floor_scaled(Decimal d, std::int64_t numerator, std::int64_t denominator) {
    using Wide = __int128;
    for (; d.exponent > 0; --d.exponent) {
        const auto shifted = try_mul(d.digits, 10);
        if (!shifted) return std::nullopt;
        d.digits = *shifted;
    }
    const Wide top = static_cast<Wide>(d.digits) * numerator;  // < 2^126
    Wide bottom = denominator;
    if (d.exponent <= -37) return 0;  // then digits < 10^18, top < 10^37 ≤ bottom
    for (; d.exponent < 0; ++d.exponent) bottom *= 10;  // ≤ 100 · 10^36 < 2^127
    const Wide result = top / bottom;
    if (result > std::numeric_limits<std::int64_t>::max()) return std::nullopt;
    return static_cast<std::int64_t>(result);
}

}  // namespace

std::string Prefetch::text() const {
    switch (kind) {
        case Kind::off: return "off";
        case Kind::jit: return "jit";
        case Kind::depth: return std::to_string(depth);
    }
    return "off";
}

std::optional<Prefetch> Prefetch::parse(std::string_view s) {
    if (s == "off") return Prefetch{};
    if (s == "jit") return Prefetch{Kind::jit, 0};
    auto d = parse_integer(s);
    if (!d || *d < 1 || *d > AxisLimits::prefetch_depth) return std::nullopt;
    return Prefetch{Kind::depth, static_cast<int>(*d)};
}

std::string Budget::text() const {
    if (kind == Kind::percent) return format_number(value) + "%";
    return std::to_string(static_cast<std::int64_t>(value));
}

std::optional<Budget> Budget::parse(std::string_view raw) {
    const std::string s = trim(raw);
    if (s.empty()) return std::nullopt;
    if (s.back() == '%') {
        auto v = parse_finite_number(trim(std::string_view(s).substr(0, s.size() - 1)));
        if (!v || *v <= 0 || *v > 100) return std::nullopt;
        return Budget{Kind::percent, *v};
    }
    static const std::map<std::string, std::int64_t> units = {
        {"B", 1},           {"KB", 1'000},      {"MB", 1'000'000},  {"GB", 1'000'000'000}, {"TB", 1'000'000'000'000},
        {"KiB", 1LL << 10}, {"MiB", 1LL << 20}, {"GiB", 1LL << 30}, {"TiB", 1LL << 40}};
    std::size_t i = 0;
    while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
    const auto number = parse_decimal(std::string_view(s).substr(0, i));
    const std::string unit = trim(std::string_view(s).substr(i));
    std::int64_t scale = 1;
    if (!unit.empty()) {
        auto u = units.find(unit);
        if (u == units.end()) return std::nullopt;
        scale = u->second;
    }
    if (!number) return std::nullopt;
    const auto bytes = floor_scaled(*number, scale, 1);
    if (!bytes || *bytes < 1 || *bytes > AxisLimits::budget_bytes) return std::nullopt;
    return Budget{Kind::bytes, static_cast<double>(*bytes)};
}

std::int64_t Budget::resolve(std::int64_t weight_bytes) const {
    if (kind == Kind::bytes) return static_cast<std::int64_t>(value);
    // From the text the cell is keyed by, so every process resolves the same percentage.
    const auto percent = parse_decimal(format_number(value));
    const auto bytes = percent && weight_bytes >= 0 ? floor_scaled(*percent, weight_bytes, 100) : std::nullopt;
    if (!bytes) {
        throw std::invalid_argument("a budget of " + text() + " of " + std::to_string(weight_bytes) +
                                    " weight bytes is not a byte count");
    }
    return *bytes;
}

std::optional<double> parse_duration_s(std::string_view raw) {
    const std::string s = trim(raw);
    if (s.empty()) return std::nullopt;
    double scale = 1.0;
    std::string_view num = s;
    switch (s.back()) {
        case 's': scale = 1; num.remove_suffix(1); break;
        case 'm': scale = 60; num.remove_suffix(1); break;
        case 'h': scale = 3600; num.remove_suffix(1); break;
        default: break;
    }
    auto v = parse_finite_number(num);
    if (!v || *v <= 0) return std::nullopt;
    return *v * scale;
}

std::int64_t CellParams::weight_bytes() const {
    // The layout's total, padding included: what the backends actually place, so "100%" holds it.
    return checked_mul(WeightLayout::total_numel_of(model), static_cast<std::int64_t>(dtype_size(dtype)),
                       "the weight bytes of model '" + model.name + "'");
}

std::string CellParams::canonical() const {
    // std::map keeps the lines sorted by name, which is what makes the text canonical.
    std::map<std::string_view, std::string> lines;
    for (const Axis& axis : axes()) {
        if (axis.keyed == Axis::Keyed::no) continue;
        std::string value = axis.get(*this);
        if (axis.keyed == Axis::Keyed::unless_default && value == axis.default_text) continue;
        lines.emplace(axis.name, std::move(value));
    }
    std::string out;
    for (const auto& [name, value] : lines) out.append(name).append("=").append(value).append("\n");
    return out;
}

std::string CellParams::full_text() const {
    std::string out = canonical();
    for (const Axis& axis : axes())
        if (axis.keyed == Axis::Keyed::no && axis.in_matrix()) out.append(axis.name).append("=").append(axis.get(*this)).append("\n");
    return out;
}

std::string fnv1a64_hex(std::string_view data) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : data) {
        h ^= c;
        h *= 0x100000001b3ull;
    }
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

std::string CellParams::key() const { return fnv1a64_hex(canonical()); }

std::string canonical_line_sql(std::string_view column, std::string_view name) {
    // Every line, the first too, follows a line break once one is put in front of the text, and
    // every line ends with one.
    const std::string text = "(char(10) || " + std::string(column) + ")";
    const std::string at = "instr(" + text + ", char(10) || '" + std::string(name) + "=')";
    const std::string rest = "substr(" + text + ", " + at + " + " + std::to_string(name.size() + 2) + ")";
    return "(CASE WHEN " + at + " > 0 THEN substr(" + rest + ", 1, instr(" + rest + ", char(10)) - 1) END)";
}

CellParams CellParams::from_canonical(std::string_view text) {
    CellParams c;
    auto bad = [](const std::string& what) { throw std::invalid_argument("cell text: " + what); };
    while (!text.empty()) {
        const auto nl = text.find('\n');
        const std::string_view line = text.substr(0, nl);
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        if (line.empty()) continue;
        const auto eq = line.find('=');
        if (eq == std::string_view::npos) bad("line without '=': " + std::string(line));
        const std::string_view name = line.substr(0, eq), value = line.substr(eq + 1);
        const Axis* axis = find_axis(name);
        if (!axis || (axis->keyed == Axis::Keyed::no && !axis->in_matrix())) bad("unknown name '" + std::string(name) + "'");
        const auto normal = axis->normalize(value);
        if (!normal) bad("'" + std::string(name) + "' must be " + axis->expects + ", got '" + std::string(value) + "'");
        axis->set(c, *normal);
    }
    if (const auto why = c.model.validate(); !why.empty()) bad(why);
    return c;
}

namespace {

// The first `count` ids of the cell's stream of random tokens.
std::vector<std::int32_t> token_stream(const CellParams& c, std::size_t count) {
    std::mt19937_64 rng(c.seed ^ 0x9e3779b97f4a7c15ull);
    std::vector<std::int32_t> tokens(count);
    for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(c.model.vocab_size));
    return tokens;
}

// The ids of `stream` (one per real token, sequence by sequence) laid out in the rows of `shape`,
// each padding row 0.
std::vector<std::int32_t> in_rows(const BatchShape& shape, std::vector<std::int32_t> stream) {
    // Without padding the rows are the stream itself (a packed batch's sequences lie back to back).
    if (shape.padded_tokens() == 0) return stream;
    std::vector<std::int32_t> rows(static_cast<std::size_t>(shape.rows()), 0);
    auto next = stream.begin();
    for (int b = 0; b < shape.batch(); ++b) {
        std::copy_n(next, shape.length(b), rows.begin() + shape.first_row(b));
        next += shape.length(b);
    }
    return rows;
}

}  // namespace

std::span<const StepPhase> step_phases(Mode mode) {
    static constexpr std::array<StepPhase, 1> infer = {StepPhase::forward};
    static constexpr std::array<StepPhase, 3> train = {StepPhase::forward, StepPhase::backward, StepPhase::optimizer};
    if (mode == Mode::train) return train;
    return infer;
}

BatchShape CellParams::batch_shape() const {
    if (lengths.is_fixed()) return BatchShape::rectangular(batch, seq);
    return BatchShape::ragged(draw_lengths(lengths, batch, seq, seed), packing);
}

std::vector<std::int32_t> CellParams::token_ids() const {
    const BatchShape shape = batch_shape();
    return in_rows(shape, token_stream(*this, static_cast<std::size_t>(shape.real_tokens())));
}

std::vector<std::int32_t> CellParams::target_ids() const {
    const BatchShape shape = batch_shape();
    std::vector<std::int32_t> stream = token_stream(*this, static_cast<std::size_t>(shape.real_tokens()) + 1);
    stream.erase(stream.begin());
    return in_rows(shape, std::move(stream));
}

std::string CellParams::label() const {
    std::string s = model.name + " " + std::string(enum_name(backend)) + " " + variant.text() + " " +
                    std::string(enum_name(dtype)) + " b" + std::to_string(batch) + " s" + std::to_string(seq);
    if (backend_traits(backend).runs_under_budget) {
        s += " streams=" + std::to_string(streams) + " prefetch=" + prefetch.text() + " budget=" + budget.text();
    }
    // The axes keyed only when set (evict, resident, tf32, dropout, repeat, ...): without them two
    // cells of one sweep could read the same.
    for (const Axis& axis : axes())
        if (axis.keyed == Axis::Keyed::unless_default && axis.get(*this) != axis.default_text)
            s += " " + std::string(axis.name) + "=" + axis.shown_text(*this);
    return s;
}

}  // namespace sweetspot
