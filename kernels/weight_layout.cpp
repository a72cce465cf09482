#include "kernels/weight_layout.hpp"

#include <stdexcept>
#include <utility>

namespace sweetspot {

namespace {

std::int64_t round_up(std::int64_t n, std::int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Appends a tensor at the next aligned offset of `unit`; unit.numel tracks the unpadded end
// until finish_unit pads it.
void add_tensor(UnitLayout& unit, std::string name, std::vector<std::int64_t> shape) {
    std::int64_t numel = 1;
    for (const auto d : shape) numel *= d;
    TensorSpec t;
    t.name = std::move(name);
    t.shape = std::move(shape);
    t.offset = round_up(unit.numel, kTensorAlignElems);
    t.numel = numel;
    unit.numel = t.offset + t.numel;
    unit.tensors.push_back(std::move(t));
}

// Padding the unit keeps the next unit aligned too when a backend packs units back to back.
void finish_unit(UnitLayout& unit) { unit.numel = round_up(unit.numel, kTensorAlignElems); }

UnitLayout make_embedding_unit(const ModelConfig& m) {
    UnitLayout u;
    u.kind = UnitKind::embedding;
    add_tensor(u, "wte.weight", {m.vocab_size, m.n_embd});
    add_tensor(u, "wpe.weight", {m.max_positions, m.n_embd});
    finish_unit(u);
    return u;
}

UnitLayout make_block_unit(const ModelConfig& m, int block) {
    const std::int64_t c = m.n_embd;
    const std::string p = "h." + std::to_string(block) + ".";
    UnitLayout u;
    u.kind = UnitKind::block;
    u.block = block;
    // Same order as block_tensor.
    add_tensor(u, p + "ln_1.weight", {c});
    add_tensor(u, p + "ln_1.bias", {c});
    add_tensor(u, p + "attn.c_attn.weight", {3 * c, c});
    add_tensor(u, p + "attn.c_attn.bias", {3 * c});
    add_tensor(u, p + "attn.c_proj.weight", {c, c});
    add_tensor(u, p + "attn.c_proj.bias", {c});
    add_tensor(u, p + "ln_2.weight", {c});
    add_tensor(u, p + "ln_2.bias", {c});
    add_tensor(u, p + "mlp.c_fc.weight", {4 * c, c});
    add_tensor(u, p + "mlp.c_fc.bias", {4 * c});
    add_tensor(u, p + "mlp.c_proj.weight", {c, 4 * c});
    add_tensor(u, p + "mlp.c_proj.bias", {c});
    finish_unit(u);
    return u;
}

UnitLayout make_head_unit(const ModelConfig& m) {
    UnitLayout u;
    u.kind = UnitKind::head;
    add_tensor(u, "ln_f.weight", {m.n_embd});
    add_tensor(u, "ln_f.bias", {m.n_embd});
    add_tensor(u, "lm_head.weight", {m.vocab_size, m.n_embd});
    finish_unit(u);
    return u;
}

}  // namespace

WeightLayout WeightLayout::for_model(const ModelConfig& m) {
    if (const auto why = m.validate(); !why.empty()) throw std::invalid_argument(why);
    WeightLayout layout;
    layout.units.reserve(static_cast<std::size_t>(m.n_layer) + 2);
    layout.units.push_back(make_embedding_unit(m));
    for (int i = 0; i < m.n_layer; ++i) layout.units.push_back(make_block_unit(m, i));
    layout.units.push_back(make_head_unit(m));
    for (const auto& u : layout.units) layout.total_numel += u.numel;
    return layout;
}

void require_layout_for(const ModelConfig& model, const WeightLayout& layout, const std::string& who) {
    const WeightLayout expected = WeightLayout::for_model(model);
    bool same = layout.units.size() == expected.units.size();
    for (std::size_t u = 0; same && u < layout.units.size(); ++u) {
        const auto& got = layout.units[u].tensors;
        const auto& want = expected.units[u].tensors;
        same = got.size() == want.size();
        for (std::size_t t = 0; same && t < got.size(); ++t) same = got[t].shape == want[t].shape;
    }
    if (!same) throw std::invalid_argument(who + ": the weight layout was not made for model '" + model.name + "'.");
}

}  // namespace sweetspot
