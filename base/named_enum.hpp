#pragma once
// Enumerations users write as text (matrix values, database columns, command-line options).
// Each declares its names once, in a specialisation of EnumNames next to the enum, and its
// text, its parser and the list the docs and messages show all come from that one table.
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sweetspot {

template <class E>
struct EnumName {
    E value;
    std::string_view name;
};

// Specialise with `static constexpr std::array<EnumName<E>, N> list`, in the order the docs
// list the names.
template <class E>
struct EnumNames;

template <class E>
constexpr std::string_view enum_name(E value) {
    for (const auto& e : EnumNames<E>::list)
        if (e.value == value) return e.name;
    return "?";
}

template <class E>
constexpr std::optional<E> parse_enum(std::string_view name) {
    for (const auto& e : EnumNames<E>::list)
        if (e.name == name) return e.value;
    return std::nullopt;
}

template <class E>
std::vector<std::string> enum_names() {
    std::vector<std::string> names;
    for (const auto& e : EnumNames<E>::list) names.emplace_back(e.name);
    return names;
}

}  // namespace sweetspot
