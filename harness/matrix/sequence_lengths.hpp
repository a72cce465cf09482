#pragma once
// The `lengths` axis: how a cell draws the real length of each of its sequences. `fixed` (every
// sequence `seq` tokens, a rectangular batch: the default), or lengths drawn from the cell's seed
// and clipped to 1 .. seq:
//   uniform:A-B           integers uniformly in [A, B]
//   lognormal:MEDIAN,SIGMA exp(N(ln MEDIAN, SIGMA²)), rounded to the nearest integer
//   zipf:A,MAX            P(k) ∝ k^−A over k = 1 .. MAX
//   file:PATH             a file of lengths, one per line ('#' starts a comment), drawn uniformly
//                         with replacement: an empirical distribution
// The draws use std::mt19937_64, whose sequence the C++ standard fixes, and this file's own
// transforms (not <random>'s distributions, which differ between standard libraries), so a seed
// gives the same lengths on every machine up to the last bit of libm's log and cos: a length
// moves only where a draw lands within an ulp of a rounding boundary.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sweetspot {

struct LengthSpec {
    enum class Kind : std::uint8_t { fixed, uniform, lognormal, zipf, file };
    Kind kind = Kind::fixed;
    double a = 0, b = 0;  // uniform: A, B; lognormal: MEDIAN, SIGMA; zipf: A, MAX
    std::string path;     // file

    bool operator==(const LengthSpec&) const = default;
    bool is_fixed() const { return kind == Kind::fixed; }

    // One text per spec ("uniform:16-512", "lognormal:330,0.85"), which parse reads back.
    std::string text() const;
    // nothing for text that is not one of the forms above, with A ≤ B, MEDIAN > 0, SIGMA ≥ 0,
    // A ≥ 0 and MAX ≥ 1 (integers where the form says so), a non-empty PATH.
    static std::optional<LengthSpec> parse(std::string_view text);
};

// What the axis accepts, for its error messages.
inline constexpr std::string_view kLengthSpecForms =
    "fixed, uniform:A-B, lognormal:MEDIAN,SIGMA, zipf:A,MAX or file:PATH";

// `batch` lengths, each in 1 .. seq, drawn from `seed` (fixed: seq each). A file is read here;
// throws std::runtime_error naming it and the line when it cannot be read, a line is not a
// positive integer, or it holds no length.
std::vector<int> draw_lengths(const LengthSpec& spec, int batch, int seq, std::uint64_t seed);

// Lengths as the results database stores a cell's draw (cells.drawn_lengths): "330,12,871".
std::string lengths_text(std::span<const int> lengths);

}  // namespace sweetspot
