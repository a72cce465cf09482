#pragma once
// Numbers, byte counts and lists as text: one formatter for each, used from the backends'
// refusals to the CLI's tables, and the strict parsers for numbers users write.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sweetspot {

// Fixed-point text of a number with `decimals` digits.
std::string fixed(double v, int decimals);
// Shortest exact-enough text of a number ("%.9g"), as used in canonical cell text and in
// messages ("1e-300", where std::to_string says "0.000000").
std::string format_number(double v);
// "1.50 GiB", "312.0 MiB", "512 B"
std::string human_bytes(double bytes);
// "1610612736 bytes (1.50 GiB)": exact, for messages that compare sizes, with the size readable.
std::string bytes_text(std::int64_t bytes);
// "a, b, c": the items of a message's list.
std::string comma_list(const std::vector<std::string>& items);

// The whole text as a decimal integer ("12", "-3"; not " 12", "12x", "1e3"), or nothing.
std::optional<std::int64_t> parse_integer(std::string_view text);
// The whole text as a finite number ("1.5", "1e-05"), or nothing.
std::optional<double> parse_finite_number(std::string_view text);

}  // namespace sweetspot
