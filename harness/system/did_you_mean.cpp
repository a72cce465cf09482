#include "harness/system/did_you_mean.hpp"

#include <algorithm>

namespace sweetspot {
namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and transpositions
// of neighbours ("modle" is one edit from "model") each cost one.
std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        for (std::size_t j = 1; j <= b.size(); ++j) {
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
            }
        }
    }
    return d[a.size()][b.size()];
}

// True for "batchsize"/"batch" and "iter"/"iterations": a word that extends or truncates a
// name is a likely typo too, though it can be many edits away.
bool extends_or_truncates(std::string_view word, std::string_view name) {
    const std::size_t shorter = std::min(word.size(), name.size());
    return shorter >= 3 && word.substr(0, shorter) == name.substr(0, shorter);
}

}  // namespace

std::string suggestion(std::string_view word, const std::vector<std::string>& candidates) {
    const std::string* best = nullptr;
    std::size_t best_distance = 3;
    for (const auto& c : candidates) {
        // Lengths that differ by three or more are three edits apart at least; skipping them
        // keeps a mistyped 100 KB key from costing a 100 KB-row table per candidate.
        if (std::max(word.size(), c.size()) - std::min(word.size(), c.size()) >= best_distance) continue;
        const std::size_t d = edit_distance(word, c);
        if (d < best_distance) {
            best = &c;
            best_distance = d;
        }
    }
    for (const auto& c : candidates) {
        if (!best && extends_or_truncates(word, c)) best = &c;
    }
    return best ? " (did you mean '" + *best + "'?)" : "";
}

}  // namespace sweetspot
