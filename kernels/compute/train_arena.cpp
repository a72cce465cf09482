#include "kernels/compute/train_arena.hpp"

#include <algorithm>

#include "kernels/compute/train_scratch.hpp"

namespace sweetspot {

TrainArena::TrainArena(const ModelConfig& m, DType dtype, int batch, int seq, bool flash) {
    const std::int64_t bt = static_cast<std::int64_t>(batch) * seq, c = m.n_embd, e = static_cast<std::int64_t>(dtype_size(dtype));
    const auto take = [&](std::int64_t bytes) {
        const std::int64_t at = total;
        total += (bytes + kAlign - 1) / kAlign * kAlign;
        return at;
    };
    const auto rows_of = [&](std::int64_t width) { return take(bt * width * e); };
    for (int l = 0; l < m.n_layer; ++l) {
        ln1.push_back(rows_of(c));
        qkv.push_back(rows_of(3 * c));
        att.push_back(rows_of(c));
        ln2.push_back(rows_of(c));
        fc_pre.push_back(rows_of(4 * c));
        if (flash) lse.push_back(take(static_cast<std::int64_t>(batch) * m.n_head * seq * 4));
    }
    for (int r = 0; r < 2 * m.n_layer + 1; ++r) resid.push_back(rows_of(c));
    xf = rows_of(c);
    logits = rows_of(padded_vocab(m.vocab_size));
    fc = rows_of(4 * c);
    dfc = rows_of(4 * c);
    dqkv = rows_of(3 * c);
    dy = rows_of(c);
    dln = rows_of(c);
    datt = rows_of(c);
    dres = rows_of(c);
    if (!flash) {
        const std::int64_t score_bytes = static_cast<std::int64_t>(batch) * m.n_head * seq * seq * e;
        scores = take(score_bytes);
        dscores = take(score_bytes);
    } else {
        flash_scratch = take(gpu::flash_attention_backward_scratch_floats(batch, seq, m.n_embd, m.n_head) * 4);
    }
    ln_scratch = take(gpu::layernorm_backward_scratch_floats(static_cast<int>(bt), m.n_embd) * 4);
    std::int64_t bias_floats = 0;
    for (const std::int64_t width : {c, 3 * c, 4 * c})
        bias_floats = std::max(bias_floats, gpu::bias_backward_scratch_floats(bt, static_cast<int>(width)));
    bias_scratch = take(bias_floats * 4);
    losses = take(bt * 4);
    loss = take(4);
    tokens = take(bt * 4);
    targets = take(bt * 4);
    partials = take(static_cast<std::int64_t>(m.n_layer + 2) * gpu::kNormPartials * 8);
    squared_norm = take(8);
}

}  // namespace sweetspot
