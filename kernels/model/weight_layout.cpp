#include "kernels/model/weight_layout.hpp"

#include <optional>
#include <stdexcept>
#include <utility>

#include "base/checked_math.hpp"
#include "kernels/model/model_family.hpp"

namespace sweetspot {

namespace {

// n rounded up to the tensor alignment, or nothing when that does not fit in 64 bits.
std::optional<std::int64_t> round_up(std::int64_t n) {
    const auto end = try_add(n, kTensorAlignElems - 1);
    if (!end) return std::nullopt;
    return *end / kTensorAlignElems * kTensorAlignElems;
}

// Appends a tensor at the next aligned offset of `unit`; unit.numel tracks the unpadded end
// until finish_unit pads it. Sizes are checked: a shape that validate() did not bound (or a bound
// that is wrong) must fail here rather than lay out tensors at wrapped offsets.
void add_tensor(UnitLayout& unit, const ModelConfig& m, std::string name, std::vector<std::int64_t> shape) {
    const auto fits = [&](std::optional<std::int64_t> v) {
        if (!v) throw std::overflow_error("the size of tensor '" + name + "' of model '" + m.name + "' overflows 64 bits");
        return *v;
    };
    std::int64_t numel = 1;
    for (const auto d : shape) numel = fits(try_mul(numel, d));
    TensorSpec t;
    t.offset = fits(round_up(unit.numel));
    t.numel = numel;
    unit.numel = fits(try_add(t.offset, t.numel));
    t.name = std::move(name);
    t.shape = std::move(shape);
    unit.tensors.push_back(std::move(t));
}

// Padding the unit keeps the next unit aligned too when a backend packs units back to back.
void finish_unit(UnitLayout& unit) {
    const auto padded = round_up(unit.numel);
    if (!padded) throw std::overflow_error("a weight unit of " + std::to_string(unit.numel) + " elements overflows 64 bits");
    unit.numel = *padded;
}

// The unit of `kind` (block `block`) with the family's tensors in their declared order.
UnitLayout make_unit(const ModelConfig& m, UnitKind kind, int block) {
    UnitLayout u;
    u.kind = kind;
    u.block = kind == UnitKind::block ? block : -1;
    for (TensorDecl& t : family_of(m).unit_tensors(m, kind, block)) add_tensor(u, m, std::move(t.name), std::move(t.shape));
    finish_unit(u);
    return u;
}

// size(unit) summed over the units of `m`, without a unit per block: every block has block 0's shapes.
template <class UnitSize>
std::int64_t sum_over_units(const ModelConfig& m, const std::string& what, UnitSize size) {
    const std::int64_t blocks = checked_mul(m.n_layer, size(make_unit(m, UnitKind::block, 0)), what);
    return checked_add(checked_add(size(make_unit(m, UnitKind::embedding, -1)), blocks, what),
                       size(make_unit(m, UnitKind::head, -1)), what);
}

std::int64_t padded_numel(const UnitLayout& u) { return u.numel; }

// add_tensor checked the padded offsets, which bound this sum.
std::int64_t unit_params(const UnitLayout& u) {
    std::int64_t params = 0;
    for (const TensorSpec& t : u.tensors) params += t.numel;
    return params;
}

std::string total_what(const ModelConfig& m) { return "the weight elements of model '" + m.name + "'"; }

}  // namespace

WeightLayout WeightLayout::for_model(const ModelConfig& m) {
    if (const auto why = m.validate(); !why.empty()) throw std::invalid_argument(why);
    WeightLayout layout;
    layout.units.reserve(static_cast<std::size_t>(m.n_layer) + 2);
    layout.units.push_back(make_unit(m, UnitKind::embedding, -1));
    for (int i = 0; i < m.n_layer; ++i) layout.units.push_back(make_unit(m, UnitKind::block, i));
    layout.units.push_back(make_unit(m, UnitKind::head, -1));
    const std::string what = total_what(m);
    for (const auto& u : layout.units) layout.total_numel = checked_add(layout.total_numel, u.numel, what);
    return layout;
}

std::int64_t WeightLayout::total_numel_of(const ModelConfig& m) {
    if (const auto why = m.validate(); !why.empty()) throw std::invalid_argument(why);
    return sum_over_units(m, total_what(m), padded_numel);
}

std::string WeightLayout::unit_name(int unit, int units) {
    if (unit < 0 || unit >= units)
        throw std::out_of_range("WeightLayout::unit_name: no unit " + std::to_string(unit) + " of " + std::to_string(units));
    if (unit == 0) return "embedding";
    if (unit == units - 1) return "head";
    return "layer " + std::to_string(unit - 1);
}

std::int64_t n_params(const ModelConfig& m) {
    return sum_over_units(m, "the parameter count of model '" + m.name + "'", unit_params);
}

double step_flops(const ModelConfig& m, int batch, int seq, bool training) {
    const double looked_up = static_cast<double>(unit_params(make_unit(m, UnitKind::embedding, -1)));
    const double multiplying = static_cast<double>(n_params(m)) - looked_up;
    const double per_token = 2.0 * multiplying + 2.0 * m.n_layer * static_cast<double>(m.n_embd) * seq;
    return (training ? 3.0 : 1.0) * per_token * batch * seq;
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
