#pragma once
// A batch's shape: its sequences' real lengths and how they lie in the rows of the activations
// ([rows, width], a sequence's positions in consecutive rows). `padded` gives every sequence the
// same number of rows, the longest length (or the stride asked for), and computes on the
// padding rows as a padded framework does; `packed` puts the sequences back to back with no
// padding anywhere. A rectangular batch (every length the same) is both at once. And what every
// forward and training step checks of its model and batch before it touches memory, each
// refusal one text prefixed with who refuses (`who`: "CpuForward", "GpuTrainStep").
#include <array>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/named_enum.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

enum class Packing : std::uint8_t { padded, packed };

template <>
struct EnumNames<Packing> {
    static constexpr std::array<EnumName<Packing>, 2> list = {{{Packing::padded, "padded"}, {Packing::packed, "packed"}}};
};

class BatchShape {
public:
    // `batch` sequences of `seq` tokens each.
    static BatchShape rectangular(int batch, int seq);
    // Sequences of these lengths (each ≥ 1, at least one), padded to `stride` rows each (0: the
    // longest; else at least the longest) or packed. Throws std::invalid_argument otherwise.
    static BatchShape ragged(std::vector<int> lengths, Packing packing, int stride = 0);

    int batch() const { return static_cast<int>(lengths_.size()); }
    std::span<const int> lengths() const { return lengths_; }
    int length(int b) const { return lengths_[static_cast<std::size_t>(b)]; }
    int longest() const { return longest_; }
    Packing packing() const { return packing_; }
    // Rows per sequence of a padded batch; a packed batch's longest length (what per-(sequence,
    // position) buffers are strided by: sequence_spans.hpp).
    int stride() const { return stride_; }
    // Every sequence stride() long: rows are batch × stride, padded and packed alike.
    bool is_rectangular() const;

    std::int64_t rows() const;  // of the activations
    std::int64_t real_tokens() const { return real_; }
    std::int64_t padded_tokens() const { return rows() - real_; }
    double padding_share() const { return static_cast<double>(padded_tokens()) / static_cast<double>(rows()); }
    // Sequence b's first row.
    std::int64_t first_row(int b) const;
    // Each sequence's first row, and each row's position in its sequence (a padding row's:
    // 0), for the kernels (int32: rows() fits, ModelLimits).
    std::vector<std::int32_t> offsets() const;
    std::vector<std::int32_t> positions() const;
    // Whether row r is a real token (not padding).
    bool is_real(std::int64_t row) const;

    bool operator==(const BatchShape&) const = default;

private:
    std::vector<int> lengths_;
    Packing packing_ = Packing::padded;
    int longest_ = 0, stride_ = 0;
    std::int64_t real_ = 0;
};

// A shape the model can run (ModelConfig::validate), `layout` made for it, batch ≥ 1 and
// 1 ≤ seq ≤ max_positions. Throws std::invalid_argument saying which does not hold.
void check_batch_shape(std::string_view who, const ModelConfig& model, const WeightLayout& layout, int batch, int seq);

// The same of a BatchShape (which has at least one sequence, each at least 1 long): every length
// and the stride at most max_positions (a position beyond the table has no row; the stride is
// what dropout masks and the GPU's per-position buffers are numbered by).
void check_batch_shape(std::string_view who, const ModelConfig& model, const WeightLayout& layout,
                       const BatchShape& shape);

// One batch's ids: `expected` of them (one per row: BatchShape::rows()), each inside the model's
// vocabulary; `what` names them ("token", "target"). Throws std::invalid_argument naming the first
// that is not.
void check_batch_ids(std::string_view who, const ModelConfig& model, std::span<const std::int32_t> ids,
                     std::int64_t expected, std::string_view what);

}  // namespace sweetspot
