#include "harness/measure/packed_fit.hpp"

#include <algorithm>
#include <ranges>
#include <stdexcept>
#include <vector>

#include "harness/matrix/sequence_lengths.hpp"
#include "harness/measure/cell_exec.hpp"

namespace sweetspot {

bool fits_in_tokens(const CellParams& cell) { return !cell.lengths.is_fixed() && cell.packing == Packing::packed; }

BatchShape packed_batch(std::span<const int> drawn, std::int64_t tokens) {
    std::vector<int> lengths;
    for (std::int64_t left = tokens; left > 0; left -= lengths.back()) {
        if (lengths.size() == drawn.size())
            throw std::invalid_argument("packed_batch: " + std::to_string(drawn.size()) + " lengths hold fewer than " +
                                        std::to_string(tokens) + " tokens");
        lengths.push_back(static_cast<int>(std::min<std::int64_t>(drawn[lengths.size()], left)));
    }
    return BatchShape::ragged(std::move(lengths), Packing::packed);
}

BatchShape packed_batch(const CellParams& cell, std::int64_t tokens) {
    // Every length is at least 1: `tokens` sequences hold `tokens` tokens.
    return packed_batch(draw_lengths(cell.lengths, static_cast<int>(tokens), cell.seq, cell.seed), tokens);
}

std::optional<std::int64_t> largest_packed_tokens(const CellParams& cell, std::int64_t capacity,
                                                  const FixedCost& fixed) {
    if (!cell_impossible_reason(cell).empty()) return std::nullopt;
    // Drawn once for every batch the search makes: each is a prefix of the same draw.
    const std::vector<int> drawn = draw_lengths(cell.lengths, AxisLimits::tokens, cell.seq, cell.seed);
    // The need grows with the tokens (more rows, as many sequences or more, none shorter), so the
    // tokens that fit are a prefix of 1 … AxisLimits::tokens.
    const auto fits = [&](std::int64_t tokens) {
        return predicted_need(estimate_memory(cell, packed_batch(drawn, tokens)), fixed) <= capacity;
    };
    const auto tokens = std::views::iota(std::int64_t{1}, std::int64_t{AxisLimits::tokens} + 1);
    const auto first_over = std::ranges::partition_point(tokens, fits);
    if (first_over == tokens.begin()) return std::nullopt;
    return *std::ranges::prev(first_over);
}

}  // namespace sweetspot
