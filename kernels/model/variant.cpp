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
    // The set one part names: a fusion's bit, or a preset's set.
    const auto part_bits = [](std::string_view part) -> std::optional<std::uint8_t> {
        if (const auto fusion = parse_enum<Fusion>(part)) return bit(*fusion);
        for (const auto& preset : kVariantPresets)
            if (preset.name == part) return preset.variant.bits_;
        return std::nullopt;
    };
    Variant v;
    while (!text.empty()) {
        const auto plus = text.find('+');
        const auto bits = part_bits(text.substr(0, plus));
        // baseline (no fusion) only stands alone.
        const bool empty_in_sum = bits == std::uint8_t{0} && (plus != std::string_view::npos || v.bits_ != 0);
        if (!bits || (v.bits_ & *bits) != 0 || empty_in_sum) return std::nullopt;
        v.bits_ |= *bits;
        if (plus == std::string_view::npos) return v;
        text.remove_prefix(plus + 1);
        if (text.empty()) return std::nullopt;  // a trailing '+'
    }
    return std::nullopt;
}

}  // namespace sweetspot
