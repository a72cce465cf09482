#pragma once
// The "did you mean" of every message about a mistyped name: a matrix key, an axis of --only or
// --set, a command.
#include <string>
#include <string_view>
#include <vector>

namespace sweetspot {

// " (did you mean 'x'?)" for the closest of `candidates` within two edits (insertions, deletions,
// substitutions, and transpositions of neighbours: "modle" is one edit from "model"), else one that
// `word` extends or truncates ("batchsize", "iter"), else nothing.
std::string suggestion(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace sweetspot
