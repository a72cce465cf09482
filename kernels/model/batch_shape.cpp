#include "kernels/model/batch_shape.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace sweetspot {

BatchShape BatchShape::rectangular(int batch, int seq) {
    if (batch < 1 || seq < 1)
        throw std::invalid_argument("BatchShape: batch and seq must be at least 1, got " + std::to_string(batch) + " × " +
                                    std::to_string(seq));
    return ragged(std::vector<int>(static_cast<std::size_t>(batch), seq), Packing::padded);
}

BatchShape BatchShape::ragged(std::vector<int> lengths, Packing packing, int stride) {
    if (lengths.empty()) throw std::invalid_argument("BatchShape: a batch needs at least one sequence");
    for (std::size_t b = 0; b < lengths.size(); ++b) {
        if (lengths[b] < 1)
            throw std::invalid_argument("BatchShape: sequence " + std::to_string(b) + " has length " +
                                        std::to_string(lengths[b]) + "; every length must be at least 1");
    }
    BatchShape s;
    s.longest_ = *std::max_element(lengths.begin(), lengths.end());
    if (stride != 0 && stride < s.longest_)
        throw std::invalid_argument("BatchShape: a stride of " + std::to_string(stride) + " rows is shorter than the " +
                                    "longest sequence (" + std::to_string(s.longest_) + ")");
    s.stride_ = stride == 0 ? s.longest_ : stride;
    s.real_ = std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0});
    s.packing_ = packing;
    s.lengths_ = std::move(lengths);
    return s;
}

bool BatchShape::is_rectangular() const {
    return std::all_of(lengths_.begin(), lengths_.end(), [&](int n) { return n == stride_; });
}

std::int64_t BatchShape::rows() const {
    return packing_ == Packing::packed ? real_ : static_cast<std::int64_t>(batch()) * stride_;
}

std::int64_t BatchShape::first_row(int b) const {
    if (packing_ == Packing::padded) return static_cast<std::int64_t>(b) * stride_;
    return std::accumulate(lengths_.begin(), lengths_.begin() + b, std::int64_t{0});
}

std::vector<std::int32_t> BatchShape::offsets() const {
    std::vector<std::int32_t> out(lengths_.size());
    std::int64_t row = 0;
    for (std::size_t b = 0; b < lengths_.size(); ++b) {
        out[b] = static_cast<std::int32_t>(row);
        row += packing_ == Packing::packed ? lengths_[b] : stride_;
    }
    return out;
}

std::vector<std::int32_t> BatchShape::positions() const {
    std::vector<std::int32_t> out(static_cast<std::size_t>(rows()), 0);
    const std::vector<std::int32_t> first = offsets();
    for (std::size_t b = 0; b < lengths_.size(); ++b) {
        for (int t = 0; t < lengths_[b]; ++t) out[static_cast<std::size_t>(first[b]) + static_cast<std::size_t>(t)] = t;
    }
    return out;
}

bool BatchShape::is_real(std::int64_t row) const {
    if (packing_ == Packing::packed) return row >= 0 && row < real_;
    if (row < 0 || row >= rows()) return false;
    return row % stride_ < lengths_[static_cast<std::size_t>(row / stride_)];
}

namespace {

void check_model_and_layout(const std::string& who, const ModelConfig& model, const WeightLayout& layout) {
    if (const auto why = model.validate(); !why.empty()) throw std::invalid_argument(why);
    require_layout_for(model, layout, who);
}

std::string max_positions_of(const ModelConfig& model) {
    return std::to_string(model.max_positions) + " (the max_positions of model '" + model.name + "')";
}

}  // namespace

void check_batch_shape(std::string_view who, const ModelConfig& model, const WeightLayout& layout, int batch, int seq) {
    const std::string name(who);
    check_model_and_layout(name, model, layout);
    if (batch < 1) throw std::invalid_argument(name + ": batch must be at least 1, got " + std::to_string(batch) + ".");
    if (seq < 1 || seq > model.max_positions) {
        throw std::invalid_argument(name + ": seq must be between 1 and " + max_positions_of(model) + ", got " +
                                    std::to_string(seq) + ".");
    }
}

void check_batch_shape(std::string_view who, const ModelConfig& model, const WeightLayout& layout,
                       const BatchShape& shape) {
    // A rectangular shape is refused in the words of its batch and seq.
    if (shape.is_rectangular()) {
        check_batch_shape(who, model, layout, shape.batch(), shape.stride());
        return;
    }
    const std::string name(who);
    check_model_and_layout(name, model, layout);
    for (int b = 0; b < shape.batch(); ++b) {
        if (shape.length(b) > model.max_positions) {
            throw std::invalid_argument(name + ": sequence " + std::to_string(b) + " has length " +
                                        std::to_string(shape.length(b)) + "; every length must be at most " +
                                        max_positions_of(model) + ".");
        }
    }
    if (shape.stride() > model.max_positions) {
        throw std::invalid_argument(name + ": a stride of " + std::to_string(shape.stride()) +
                                    " rows is longer than " + max_positions_of(model) + ".");
    }
}

void check_batch_ids(std::string_view who, const ModelConfig& model, std::span<const std::int32_t> ids,
                     std::int64_t expected, std::string_view what) {
    const std::string name(who), kind(what);
    if (static_cast<std::int64_t>(ids.size()) != expected) {
        throw std::invalid_argument(name + ": expected " + std::to_string(expected) + " " + kind +
                                    " ids (one per row of the batch), got " + std::to_string(ids.size()) + ".");
    }
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= model.vocab_size) {
            throw std::invalid_argument(name + ": " + kind + " " + std::to_string(ids[i]) + " at index " +
                                        std::to_string(i) + " is outside the vocabulary of model '" + model.name +
                                        "' (" + std::to_string(model.vocab_size) + " tokens).");
        }
    }
}

}  // namespace sweetspot
