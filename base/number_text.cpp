#include "base/number_text.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace sweetspot {

std::string fixed(double v, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

std::string format_number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}

std::string human_bytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    return u == 0 ? fixed(bytes, 0) + " B" : fixed(bytes, bytes < 10 ? 2 : 1) + " " + units[u];
}

std::string bytes_text(std::int64_t bytes) {
    return std::to_string(bytes) + " bytes (" + human_bytes(static_cast<double>(bytes)) + ")";
}

std::string comma_list(const std::vector<std::string>& items) {
    std::string out;
    for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
    return out;
}

std::optional<std::int64_t> parse_integer(std::string_view text) {
    std::int64_t v = 0;
    const char* end = text.data() + text.size();
    const auto [p, ec] = std::from_chars(text.data(), end, v);
    if (ec != std::errc() || p != end) return std::nullopt;
    return v;
}

std::optional<double> parse_finite_number(std::string_view text) {
    double v = 0;
    const char* end = text.data() + text.size();
    const auto [p, ec] = std::from_chars(text.data(), end, v);
    if (ec != std::errc() || p != end || !std::isfinite(v)) return std::nullopt;
    return v;
}

}  // namespace sweetspot
