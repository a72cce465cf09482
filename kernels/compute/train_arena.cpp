#include "kernels/compute/train_arena.hpp"

#include "kernels/compute/family_compute.hpp"
#include "kernels/compute/gelu_from_output.hpp"
#include "kernels/compute/train_scratch.hpp"
#include "kernels/model/model_family.hpp"

namespace sweetspot {

TrainArena::TrainArena(const ModelConfig& m, DType dtype, const BatchShape& shape, const Variant& variant,
                       Recompute recompute) {
    const bool flash = variant.has(Fusion::flash_attention), inplace_ln = variant.has(Fusion::inplace_ln);
    const bool inplace_gelu = variant.has(Fusion::inplace_gelu);
    const std::int64_t bt = shape.rows(), c = m.n_embd, e = static_cast<std::int64_t>(dtype_size(dtype));
    // What is numbered by (sequence, head, position) takes the stride: the longest of a ragged batch.
    const std::int64_t batch = shape.batch(), seq = shape.stride();
    const FamilyDecl& family = family_of(m);
    const QkvHeads heads{m.n_head, m.kv_heads(), m.head_dim()};
    const std::int64_t f = m.ffn_width(), pre_width = f * family.mlp_inputs;
    const auto take = [&](std::int64_t bytes) {
        const std::int64_t at = total;
        total += (bytes + kAlign - 1) / kAlign * kAlign;
        return at;
    };
    const auto rows_of = [&](std::int64_t width) { return take(bt * width * e); };
    // Each activation of a block: its entries, its bytes, and whether `recompute` keeps it
    // (recompute.hpp): kept_below(s) for what the ladder recomputes from setting s up.
    struct Activation {
        std::vector<std::int64_t>* offsets;
        std::int64_t bytes;
        bool kept;
    };
    const auto kept_below = [&](Recompute first) { return recompute < first; };
    const std::int64_t lse_bytes = flash ? batch * m.n_head * seq * 4 : 0;
    const std::int64_t rstd_bytes = inplace_ln ? bt * 4 : 0;
    // Under inplace_gelu the GELU's backward reads its output and bits: nothing below mlp, which
    // runs the MLP's input again, recomputes them.
    const std::int64_t fc_pre_bytes = inplace_gelu ? 0 : bt * pre_width * e;
    const std::int64_t branch_bytes = inplace_gelu ? gelu_output::branch_bytes(bt * f) : 0;
    const Activation activations[] = {
        {&ln1, bt * c * e, kept_below(Recompute::block)},
        {&ln1_rstd, rstd_bytes, kept_below(Recompute::block)},
        {&qkv, bt * heads.ld() * e, kept_below(Recompute::block)},
        {&att, bt * c * e, kept_below(Recompute::attention)},
        {&lse, lse_bytes, kept_below(Recompute::attention)},
        {&x_mid, bt * c * e, !inplace_ln && kept_below(Recompute::block)},
        {&ln2, bt * c * e, keeps_ln2_output(recompute, inplace_ln)},
        {&ln2_rstd, rstd_bytes, kept_below(Recompute::block)},
        {&fc_pre, fc_pre_bytes, kept_below(Recompute::mlp)},
        {&fc, bt * f * e, kept_below(inplace_gelu ? Recompute::mlp : Recompute::gelu)},
        {&gelu_branch, branch_bytes, kept_below(Recompute::mlp)},
    };
    for (int l = 0; l < m.n_layer; ++l)
        for (const Activation& a : activations)
            if (a.bytes > 0 && a.kept) a.offsets->push_back(take(a.bytes));
    // The backward reads the residual stream in ln_1's and ln_f's backwards but with inplace_ln,
    // and in block's recomputation from each block's input.
    for (int r = 0; r < m.n_layer + 1; ++r)
        if (!inplace_ln || (recompute == Recompute::block && r < m.n_layer)) resid.push_back(rows_of(c));
    xf = rows_of(c);
    if (inplace_ln) lnf_rstd = take(bt * 4);
    logits = rows_of(padded_vocab(m.vocab_size));
    scratch = total;
    for (const Activation& a : activations)
        if (a.bytes > 0 && !a.kept) a.offsets->assign(static_cast<std::size_t>(m.n_layer), take(a.bytes));
    if (resid.size() < static_cast<std::size_t>(m.n_layer + 1)) resid.resize(static_cast<std::size_t>(m.n_layer + 1), rows_of(c));
    dfc = rows_of(pre_width);
    dqkv = rows_of(heads.ld());
    dy = rows_of(c);
    dln = rows_of(c);
    datt = rows_of(c);
    dres = rows_of(c);
    if (!flash) {
        const std::int64_t score_bytes = batch * m.n_head * seq * seq * e;
        scores = take(score_bytes);
        dscores = take(score_bytes);
    } else {
        flash_scratch = take(gpu::flash_attention_backward_scratch_floats(bt, heads) * 4);
    }
    const gpu::FamilyTrainScratch family_scratch = compute_of(m.family).gpu_train_scratch(m, static_cast<int>(bt));
    norm_scratch = take(family_scratch.norm_floats * 4);
    bias_scratch = take(family_scratch.bias_floats * 4);
    losses = take(bt * 4);
    loss = take(4);
    tokens = take(bt * 4);
    targets = take(bt * 4);
    partials = take(static_cast<std::int64_t>(m.n_layer + 2) * gpu::kNormPartials * 8);
    squared_norm = take(8);
    if (inplace_ln) unrecoverable = take(4);
    gelu_table = inplace_gelu && dtype != DType::fp32;
    if (gelu_table) gelu_derivatives = take(gelu_output::kDerivativeTableSize * 4);
    if (family.rotary || !shape.is_rectangular()) positions = take(bt * 4);
    if (family.rotary) frequencies = take(static_cast<std::int64_t>(m.head_dim() / 2) * 4);
    if (!shape.is_rectangular()) spans = take(2 * batch * 4);
}

}  // namespace sweetspot
