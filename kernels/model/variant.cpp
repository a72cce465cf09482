#include "kernels/model/variant.hpp"

namespace sweetspot {

std::string Variant::fusions_text() const {
    std::string out;
    for (const auto& f : EnumNames<Fusion>::list)
        if (has(f.value)) out.append(out.empty() ? "" : "+").append(f.name);
    return out.empty() ? "none" : out;
}

std::string Variant::text() const {
    for (const auto& preset : kVariantPresets)
        if (preset.variant == *this) return std::string(preset.name);
    return fusions_text();
}

std::optional<Variant> Variant::parse(std::string_view text) {
    for (const auto& preset : kVariantPresets)
        if (preset.name == text) return preset.variant;
    Variant v;
    while (!text.empty()) {
        const auto plus = text.find('+');
        const auto fusion = parse_enum<Fusion>(text.substr(0, plus));
        if (!fusion || v.has(*fusion)) return std::nullopt;
        v.bits_ |= bit(*fusion);
        if (plus == std::string_view::npos) return v;
        text.remove_prefix(plus + 1);
        if (text.empty()) return std::nullopt;  // a trailing '+'
    }
    return std::nullopt;
}

}  // namespace sweetspot
