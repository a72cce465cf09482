#pragma once
// Numbers as the terminal shows them: progress lines, tables, messages.
#include <string>

namespace sweetspot {

// Fixed-point text of a number with `decimals` digits.
std::string fixed(double v, int decimals);
// "1.50 GiB", "312.0 MiB", "512 B"
std::string human_bytes(double bytes);

}  // namespace sweetspot
