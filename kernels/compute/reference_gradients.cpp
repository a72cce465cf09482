#include "kernels/compute/reference_gradients.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>

#include "kernels/compute/reference_ops.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"

namespace sweetspot {

namespace {

using namespace reference;

// Where sequence_step adds each unit's gradient: `buffer(u)` while it computes it (the backward
// visits each unit once, head to embedding), `finished(u)` once it is done with it.
struct GradientSink {
    std::function<std::vector<double>&(std::size_t)> buffer;
    std::function<void(std::size_t)> finished;
};

// The loss summed over one sequence's targets, its gradients (scaled by `per_target`, 1 / the
// batch's targets, so the batch's loss is their mean) added to the sink's buffers.
double sequence_step(const ModelConfig& m, const WeightLayout& layout, std::span<const float* const> units,
                     std::span<const std::int32_t> tokens, std::span<const std::int32_t> targets, const Dims& d,
                     double per_target, const GradientSink& sink) {
    const std::size_t seq = tokens.size();
    Rows x = embed(tokens, units[0], layout.units[0], d);
    std::vector<BlockTape> tapes;
    for (int l = 0; l < m.n_layer; ++l) {
        const auto u = static_cast<std::size_t>(WeightLayout::block_unit(l));
        block_forward(x, d, l, units[u], layout.units[u], &tapes.emplace_back());
    }
    const auto hu = static_cast<std::size_t>(layout.head_unit());
    const UnitLayout& hl = layout.units[hu];
    const TensorView lnf_w = tensor_of(units[hu], hl, gpt2::head_tensor::lnf_w);
    const Rows xf = layer_norm(x, d.c, lnf_w, tensor_of(units[hu], hl, gpt2::head_tensor::lnf_b), d.eps);
    Rows dlogits = dense(xf, d.c, d.vocab, tensor_of(units[hu], hl, gpt2::head_tensor::lm_head), nullptr);

    // Cross-entropy: loss = logsumexp(z) − z[target]; dloss/dz = softmax(z) − onehot(target).
    double loss = 0.0;
    for (std::size_t t = 0; t < seq; ++t) {
        double* z = &dlogits[t * d.vocab];
        const double top = *std::max_element(z, z + d.vocab);
        double total = 0.0;
        for (std::size_t v = 0; v < d.vocab; ++v) total += std::exp(z[v] - top);
        const auto target = static_cast<std::size_t>(targets[t]);
        loss += top + std::log(total) - z[target];
        for (std::size_t v = 0; v < d.vocab; ++v) z[v] = std::exp(z[v] - top) / total * per_target;
        z[target] -= per_target;
    }

    std::vector<double>& head_grads = sink.buffer(hu);
    Rows dxf = dense_backward(xf, dlogits, d.c, d.vocab, tensor_of(units[hu], hl, gpt2::head_tensor::lm_head),
                              gradient_of(head_grads, hl, gpt2::head_tensor::lm_head), nullptr);
    Rows dx = layer_norm_backward(x, dxf, d.c, lnf_w, d.eps, gradient_of(head_grads, hl, gpt2::head_tensor::lnf_w),
                                  gradient_of(head_grads, hl, gpt2::head_tensor::lnf_b));
    sink.finished(hu);
    for (int l = m.n_layer - 1; l >= 0; --l) {
        const auto u = static_cast<std::size_t>(WeightLayout::block_unit(l));
        block_backward(dx, tapes[static_cast<std::size_t>(l)], d, l, units[u], layout.units[u], sink.buffer(u));
        sink.finished(u);
    }
    embed_backward(tokens, dx, layout.units[0], d, sink.buffer(0));
    sink.finished(0);
    return loss;
}

void check_targets(const char* what, const ModelConfig& model, std::span<const std::int32_t> tokens,
                   std::span<const std::int32_t> targets) {
    if (targets.size() != tokens.size())
        throw std::invalid_argument(std::string(what) + ": expected batch × seq targets, got " +
                                    std::to_string(targets.size()) + ".");
    for (const std::int32_t target : targets) {
        if (target < 0 || target >= model.vocab_size)
            throw std::invalid_argument(std::string(what) + ": target " + std::to_string(target) +
                                        " is outside the vocabulary.");
    }
}

}  // namespace

ReferenceGradients reference_gradients(const ModelConfig& model, const WeightLayout& layout,
                                       std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                       std::span<const std::int32_t> targets, int batch, int seq,
                                       const Dropout& dropout) {
    check_arguments("reference_gradients", model, layout, units, tokens, batch, seq);
    check_targets("reference_gradients", model, tokens, targets);
    Dims d = dims_of(model, dropout.for_shape(seq, model.max_positions));
    ReferenceGradients out;
    for (const UnitLayout& unit : layout.units) out.units.emplace_back(static_cast<std::size_t>(unit.numel), 0.0);
    const GradientSink sink{[&](std::size_t u) -> std::vector<double>& { return out.units[u]; }, [](std::size_t) {}};
    const auto seq_len = static_cast<std::size_t>(seq);
    const double per_target = 1.0 / static_cast<double>(tokens.size());
    for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b) {
        d.sequence = b;
        out.loss += sequence_step(model, layout, units, tokens.subspan(b * seq_len, seq_len),
                                  targets.subspan(b * seq_len, seq_len), d, per_target, sink);
    }
    out.loss *= per_target;
    return out;
}

double reference_gradients_by_unit(const ModelConfig& model, const WeightLayout& layout,
                                   std::span<const float* const> units, std::span<const std::int32_t> tokens,
                                   std::span<const std::int32_t> targets, const Dropout& dropout,
                                   const std::function<void(int, std::span<const double>)>& unit_done) {
    const int seq = static_cast<int>(tokens.size());
    check_arguments("reference_gradients_by_unit", model, layout, units, tokens, 1, seq);
    check_targets("reference_gradients_by_unit", model, tokens, targets);
    const Dims d = dims_of(model, dropout.for_shape(seq, model.max_positions));
    std::vector<double> buffer;
    const GradientSink sink{[&](std::size_t u) -> std::vector<double>& {
                                buffer.assign(static_cast<std::size_t>(layout.units[u].numel), 0.0);
                                return buffer;
                            },
                            [&](std::size_t u) { unit_done(static_cast<int>(u), buffer); }};
    const double per_target = 1.0 / static_cast<double>(tokens.size());
    return sequence_step(model, layout, units, tokens, targets, d, per_target, sink) * per_target;
}

}  // namespace sweetspot
