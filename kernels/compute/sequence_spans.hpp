#pragma once
// Where each sequence of a batch lies in the rows of an activation ([rows, width], a sequence's
// positions in consecutive rows): a rectangular batch (sequence b at rows b·seq .. b·seq + seq − 1),
// or a ragged one whose sequences have their own lengths, either padded to a common stride or
// packed back to back with no padding. Attention reads a sequence's rows only, so the kernels
// take this one value for all three layouts; everything indexed per (sequence, head, position) —
// the logsumexp a training forward keeps, the dropout mask — keeps the stride `seq`, so that a
// ragged batch's positions have the indices they would have in the padded batch.
#include <cstdint>

#include "base/host_device.hpp"

namespace sweetspot {

struct SequenceSpans {
    int seq = 0;                            // rectangular: every length; ragged: the longest
    const std::int32_t* offsets = nullptr;  // device [batch]: each sequence's first row; null: b·seq
    const std::int32_t* lengths = nullptr;  // device [batch]: each sequence's positions; null: seq

    static SequenceSpans rectangular(int seq) { return {seq, nullptr, nullptr}; }
    // offsets and lengths in device memory, each length at most `longest`.
    static SequenceSpans ragged(int longest, const std::int32_t* offsets, const std::int32_t* lengths) {
        return {longest, offsets, lengths};
    }

    SWEETSPOT_HOST_DEVICE bool is_rectangular() const { return offsets == nullptr; }
    SWEETSPOT_HOST_DEVICE std::int64_t first_row(int b) const {
        return offsets != nullptr ? offsets[b] : static_cast<std::int64_t>(b) * seq;
    }
    SWEETSPOT_HOST_DEVICE int length(int b) const { return lengths != nullptr ? lengths[b] : seq; }
};

}  // namespace sweetspot
