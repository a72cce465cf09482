#pragma once
// JSON from files we do not control (safetensors headers, config.json), parsed by nlohmann::json
// with what it allows but a checkpoint must not have refused: duplicate keys (which value would
// count is ambiguous) and deep nesting. Internal to the checkpoint readers in kernels/.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace sweetspot {

inline constexpr int kMaxJsonDepth = 64;

// Throws CheckpointError "<label>: <what> is not valid JSON: <detail>" for any syntax error,
// invalid UTF-8, NUL byte, duplicate key, or nesting deeper than kMaxJsonDepth.
nlohmann::json parse_strict_json(std::string_view text, const std::string& label, const std::string& what);

// A value as the file has it, cut short: a message must stay readable whatever the file holds.
std::string json_excerpt(const nlohmann::json& value);

}  // namespace sweetspot
