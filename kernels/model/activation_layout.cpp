#include "kernels/model/activation_layout.hpp"

#include "base/checked_math.hpp"
#include "kernels/model/model_family.hpp"

namespace sweetspot {

namespace {

constexpr std::string_view what = "the activations of the forward";

// `rows` rows of `batch` sequences `seq` apart (the stride), rectangular or not.
ActivationLayout layout_of(const ModelConfig& model, DType dtype, std::int64_t rows, std::int64_t batch,
                           std::int64_t seq, bool rectangular, bool keeps_scores) {
    const std::int64_t c = model.n_embd;
    const auto esize = static_cast<std::int64_t>(dtype_size(dtype));
    const auto int32_size = static_cast<std::int64_t>(sizeof(std::int32_t));
    ActivationLayout l;
    std::int64_t bytes = 0;
    // The next buffer of `elems` elements of `elem_bytes`: its offset; the end moves to the next
    // aligned byte after it.
    const auto carve = [&](std::int64_t elems, std::int64_t elem_bytes) {
        const std::int64_t offset = bytes;
        const std::int64_t end = checked_add(bytes, checked_mul(elems, elem_bytes, what), what);
        bytes = checked_add(end, kActivationAlignBytes - 1, what) / kActivationAlignBytes * kActivationAlignBytes;
        return offset;
    };
    const std::int64_t score_elems =
        keeps_scores ? checked_mul(checked_mul(checked_mul(batch, seq, what), std::int64_t{model.n_head}, what), seq, what)
                     : 0;
    l.x = carve(checked_mul(rows, c, what), esize);
    l.ln = carve(checked_mul(rows, c, what), esize);
    const FamilyDecl& family = family_of(model);
    const std::int64_t qkv_width =
        (std::int64_t{model.n_head} + 2 * std::int64_t{model.kv_heads()}) * std::int64_t{model.head_dim()};
    l.qkv = carve(checked_mul(rows, qkv_width, what), esize);
    l.scores = carve(score_elems, esize);
    l.scores_bytes = score_elems * esize;
    l.att = carve(checked_mul(rows, c, what), esize);
    l.fc = carve(checked_mul(rows, std::int64_t{model.ffn_width()} * family.mlp_inputs, what), esize);
    l.y = carve(checked_mul(rows, c, what), esize);
    l.logits = carve(checked_mul(rows, std::int64_t{model.vocab_size}, what), esize);
    l.tokens = carve(rows, int32_size);
    if (family.rotary || !rectangular) l.positions = carve(rows, int32_size);
    if (family.rotary) l.frequencies = carve(model.head_dim() / 2, static_cast<std::int64_t>(sizeof(float)));
    if (!rectangular) l.spans = carve(2 * batch, int32_size);
    l.total_bytes = bytes;
    return l;
}

}  // namespace

ActivationLayout activation_layout(const ModelConfig& model, DType dtype, const BatchShape& shape, bool keeps_scores) {
    return layout_of(model, dtype, shape.rows(), shape.batch(), shape.stride(), shape.is_rectangular(), keeps_scores);
}

// Not through a BatchShape, whose lengths would take memory of the batch's size: the checked
// arithmetic must also refuse a batch no memory holds.
ActivationLayout activation_layout(const ModelConfig& model, DType dtype, int batch, int seq, bool keeps_scores) {
    return layout_of(model, dtype, checked_mul(std::int64_t{batch}, std::int64_t{seq}, what), batch, seq, true,
                     keeps_scores);
}

}  // namespace sweetspot
