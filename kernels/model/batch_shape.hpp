#pragma once
// What every forward and training step checks of its model and batch before it touches memory,
// each refusal one text prefixed with who refuses (`who`: "CpuForward", "GpuTrainStep").
#include <cstdint>
#include <span>
#include <string_view>

#include "kernels/model/model_config.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {

// A shape the model can run (ModelConfig::validate), `layout` made for it, batch ≥ 1 and
// 1 ≤ seq ≤ max_positions. Throws std::invalid_argument saying which does not hold.
void check_batch_shape(std::string_view who, const ModelConfig& model, const WeightLayout& layout, int batch, int seq);

// One batch's ids: `expected` of them (batch × seq), each inside the model's vocabulary; `what`
// names them ("token", "target"). Throws std::invalid_argument naming the first that is not.
void check_batch_ids(std::string_view who, const ModelConfig& model, std::span<const std::int32_t> ids,
                     std::int64_t expected, std::string_view what);

}  // namespace sweetspot
