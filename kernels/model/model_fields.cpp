#include "kernels/model/model_fields.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <type_traits>

#include "base/number_text.hpp"

namespace sweetspot {
namespace {

template <class Field, class Kind>
constexpr bool is = std::is_same_v<std::decay_t<Field>, Kind>;

template <class Field>
constexpr bool is_real = is<Field, RealField<float>> || is<Field, RealField<double>>;

// A real as `list` says it: "%g", a float's 1e-05 rather than its exact 9.99999975e-06.
std::string short_number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

}  // namespace

std::string model_field_text(const ModelField& f, const ModelConfig& m) {
    return std::visit(
        [&](const auto& kind) -> std::string {
            using K = decltype(kind);
            if constexpr (is<K, IntegerField>) return std::to_string(m.*kind.field);
            else if constexpr (is_real<K>) return format_number(m.*kind.field);
            else if constexpr (is<K, ChoiceField<ModelFamily>>) return std::string(enum_name(m.*kind.field));
            else return (m.*kind.field).text();
        },
        f.kind);
}

std::string model_fields_text(const ModelConfig& m) {
    std::string text;
    for (const ModelField& f : kModelFields) {
        if (!text.empty()) text += ' ';
        text += std::string(f.axis) + '=' + model_field_text(f, m);
    }
    return text;
}

std::optional<std::string> normal_model_field(const ModelField& f, std::string_view text) {
    return std::visit(
        [&](const auto& kind) -> std::optional<std::string> {
            using K = decltype(kind);
            if constexpr (is<K, IntegerField>) {
                const auto v = parse_integer(text);
                if (!v || *v < kind.min || *v > kind.max) return std::nullopt;
                return std::to_string(*v);
            } else if constexpr (is_real<K>) {
                // Checked as a double, before it becomes the field's type, where 1e-300 would be a
                // float's 0.
                const auto v = parse_finite_number(text);
                if (!v || *v < kind.min || (kind.min_excluded && *v == kind.min) || *v > kind.max) return std::nullopt;
                using Real = std::remove_reference_t<decltype(ModelConfig{}.*kind.field)>;
                return format_number(static_cast<Real>(*v));
            } else if constexpr (is<K, ChoiceField<ModelFamily>>) {
                if (!parse_enum<ModelFamily>(text)) return std::nullopt;
                return std::string(text);
            } else {
                const auto r = RopeScaling::parse(text);
                if (!r) return std::nullopt;
                return r->text();
            }
        },
        f.kind);
}

void set_model_field(const ModelField& f, ModelConfig& m, const std::string& normal) {
    std::visit(
        [&](const auto& kind) {
            using K = decltype(kind);
            if constexpr (is<K, IntegerField>) {
                m.*kind.field = static_cast<int>(parse_integer(normal).value());
            } else if constexpr (is_real<K>) {
                using Real = std::remove_reference_t<decltype(m.*kind.field)>;
                m.*kind.field = static_cast<Real>(parse_finite_number(normal).value());
            } else if constexpr (is<K, ChoiceField<ModelFamily>>) {
                m.*kind.field = parse_enum<ModelFamily>(normal).value();
            } else {
                m.*kind.field = RopeScaling::parse(normal).value();
            }
        },
        f.kind);
}

std::string model_field_expects(const ModelField& f) {
    return std::visit(
        [&](const auto& kind) -> std::string {
            using K = decltype(kind);
            if constexpr (is<K, IntegerField>) {
                return "an integer from " + std::to_string(kind.min) + " to " + std::to_string(kind.max);
            } else if constexpr (is_real<K>) {
                if (std::isinf(kind.max))
                    return kind.min == 0 && kind.min_excluded ? "a positive number" : "a number above " + format_number(kind.min);
                return "a number from " + format_number(kind.min) + " to " + format_number(kind.max);
            } else if constexpr (is<K, ChoiceField<ModelFamily>>) {
                return "one of: " + comma_list(enum_names<ModelFamily>());
            } else {
                return "\"off\" or factor,low_freq_factor,high_freq_factor,original_max_positions";
            }
        },
        f.kind);
}

std::vector<std::string> model_field_choices(const ModelField& f) {
    if (std::holds_alternative<ChoiceField<ModelFamily>>(f.kind)) return enum_names<ModelFamily>();
    return {};
}

std::string model_field_display(const ModelField& f, const ModelConfig& m) {
    return std::visit(
        [&](const auto& kind) -> std::string {
            using K = decltype(kind);
            if constexpr (is_real<K>) {
                return short_number(m.*kind.field);
            } else if constexpr (is<K, RopeScalingField>) {
                const RopeScaling& r = m.*kind.field;
                if (!r.enabled) return "off";
                return "factor " + short_number(r.factor) + ", low_freq_factor " + short_number(r.low_freq_factor) +
                       ", high_freq_factor " + short_number(r.high_freq_factor) + ", original_max_positions " +
                       std::to_string(r.original_max_positions);
            } else {
                return model_field_text(f, m);
            }
        },
        f.kind);
}

std::optional<int> model_field_in_effect(const ModelField& f, const ModelConfig& m) {
    const auto* count = std::get_if<IntegerField>(&f.kind);
    if (count == nullptr || count->zero_is == nullptr) return std::nullopt;
    const int value = m.*count->field;
    return value != 0 ? value : count->factor * m.*count->zero_is;
}

const ModelField& model_field_of(int ModelConfig::*field) {
    for (const ModelField& f : kModelFields)
        if (const auto* count = std::get_if<IntegerField>(&f.kind); count != nullptr && count->field == field) return f;
    throw std::logic_error("kModelFields: no integer field for a member a field's zero_is names");
}

}  // namespace sweetspot
