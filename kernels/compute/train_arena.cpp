#include "kernels/compute/train_arena.hpp"

#include <algorithm>

#include "kernels/compute/train_scratch.hpp"

namespace sweetspot {

TrainArena::TrainArena(const ModelConfig& m, DType dtype, int batch, int seq, bool flash, Recompute recompute) {
    const std::int64_t bt = static_cast<std::int64_t>(batch) * seq, c = m.n_embd, e = static_cast<std::int64_t>(dtype_size(dtype));
    const auto take = [&](std::int64_t bytes) {
        const std::int64_t at = total;
        total += (bytes + kAlign - 1) / kAlign * kAlign;
        return at;
    };
    const auto rows_of = [&](std::int64_t width) { return take(bt * width * e); };
    // Each activation of a block: its entries, its bytes, and the first setting of the ladder
    // that recomputes it (recompute.hpp).
    struct Activation {
        std::vector<std::int64_t>* offsets;
        std::int64_t bytes;
        Recompute recomputed_from;
    };
    const std::int64_t lse_bytes = flash ? static_cast<std::int64_t>(batch) * m.n_head * seq * 4 : 0;
    const Activation activations[] = {
        {&ln1, bt * c * e, Recompute::block},          {&qkv, bt * 3 * c * e, Recompute::block},
        {&att, bt * c * e, Recompute::attention},      {&lse, lse_bytes, Recompute::attention},
        {&x_mid, bt * c * e, Recompute::block},        {&ln2, bt * c * e, Recompute::mlp},
        {&fc_pre, bt * 4 * c * e, Recompute::mlp},     {&fc, bt * 4 * c * e, Recompute::gelu},
    };
    const auto kept = [&](const Activation& a) { return recompute < a.recomputed_from; };
    for (int l = 0; l < m.n_layer; ++l)
        for (const Activation& a : activations)
            if (a.bytes > 0 && kept(a)) a.offsets->push_back(take(a.bytes));
    for (int r = 0; r < m.n_layer + 1; ++r) resid.push_back(rows_of(c));
    xf = rows_of(c);
    logits = rows_of(padded_vocab(m.vocab_size));
    scratch = total;
    for (const Activation& a : activations)
        if (a.bytes > 0 && !kept(a)) a.offsets->assign(static_cast<std::size_t>(m.n_layer), take(a.bytes));
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
