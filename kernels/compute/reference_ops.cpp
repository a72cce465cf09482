#include "kernels/compute/reference_ops.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace sweetspot::reference {

Dims dims_of(const ModelConfig& m, const Dropout& dropout) {
    return {static_cast<std::size_t>(m.n_embd), static_cast<std::size_t>(m.n_head),
            static_cast<std::size_t>(m.head_dim()), static_cast<std::size_t>(m.vocab_size), m.ln_eps, dropout};
}

double row_dropout(const Dims& d, std::size_t seq, std::uint32_t site, std::size_t i) {
    return d.dropout.row_factor(site, d.sequence * seq + i / d.c, d.c, i % d.c);
}

// loss = logsumexp(z) − z[target]; dloss/dz = softmax(z) − onehot(target).
double cross_entropy(Rows& logits, std::span<const std::int32_t> targets, std::size_t vocab, double per_target) {
    double loss = 0.0;
    for (std::size_t t = 0; t < targets.size(); ++t) {
        double* z = &logits[t * vocab];
        const double top = *std::max_element(z, z + vocab);
        double total = 0.0;
        for (std::size_t v = 0; v < vocab; ++v) total += std::exp(z[v] - top);
        const auto target = static_cast<std::size_t>(targets[t]);
        loss += top + std::log(total) - z[target];
        for (std::size_t v = 0; v < vocab; ++v) z[v] = std::exp(z[v] - top) / total * per_target;
        z[target] -= per_target;
    }
    return loss;
}

namespace {

// Mean and 1 / sqrt(variance + eps) of one row.
struct RowStats {
    double mean, rstd;
};

RowStats row_stats(const double* in, std::size_t width, double eps) {
    double mean = 0.0;
    for (std::size_t i = 0; i < width; ++i) mean += in[i];
    mean /= static_cast<double>(width);
    double var = 0.0;
    for (std::size_t i = 0; i < width; ++i) var += (in[i] - mean) * (in[i] - mean);
    var /= static_cast<double>(width);
    return {mean, 1.0 / std::sqrt(var + eps)};
}

}  // namespace

Rows layer_norm(const Rows& x, std::size_t width, TensorView gamma, TensorView beta, double eps) {
    Rows y(x.size());
    for (std::size_t r = 0; r < x.size() / width; ++r) {
        const double* in = &x[r * width];
        const RowStats s = row_stats(in, width, eps);
        for (std::size_t i = 0; i < width; ++i) y[r * width + i] = (in[i] - s.mean) * s.rstd * gamma[i] + beta[i];
    }
    return y;
}

// With x̂ = (x − mean)·rstd and g = dy·γ: dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)).
Rows layer_norm_backward(const Rows& x, const Rows& dy, std::size_t width, TensorView gamma, double eps, double* dgamma,
                         double* dbeta) {
    Rows dx(x.size());
    for (std::size_t r = 0; r < x.size() / width; ++r) {
        const double* in = &x[r * width];
        const double* grad = &dy[r * width];
        const RowStats s = row_stats(in, width, eps);
        double mean_g = 0.0, mean_gx = 0.0;
        for (std::size_t i = 0; i < width; ++i) {
            const double xhat = (in[i] - s.mean) * s.rstd;
            dgamma[i] += grad[i] * xhat;
            dbeta[i] += grad[i];
            mean_g += grad[i] * gamma[i];
            mean_gx += grad[i] * gamma[i] * xhat;
        }
        mean_g /= static_cast<double>(width);
        mean_gx /= static_cast<double>(width);
        for (std::size_t i = 0; i < width; ++i) {
            const double xhat = (in[i] - s.mean) * s.rstd;
            dx[r * width + i] = s.rstd * (grad[i] * gamma[i] - mean_g - xhat * mean_gx);
        }
    }
    return dx;
}

Rows dense(const Rows& x, std::size_t in_dim, std::size_t out_dim, TensorView w, const TensorView* b) {
    const std::size_t rows = x.size() / in_dim;
    Rows y(rows * out_dim);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t o = 0; o < out_dim; ++o) {
            double acc = b != nullptr ? (*b)[o] : 0.0;
            for (std::size_t i = 0; i < in_dim; ++i) acc += x[r * in_dim + i] * w[o * in_dim + i];
            y[r * out_dim + o] = acc;
        }
    }
    return y;
}

Rows dense_backward(const Rows& x, const Rows& dy, std::size_t in_dim, std::size_t out_dim, TensorView w, double* dw,
                    double* db) {
    const std::size_t rows = x.size() / in_dim;
    Rows dx(x.size(), 0.0);
    for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t o = 0; o < out_dim; ++o) {
            const double g = dy[r * out_dim + o];
            if (db != nullptr) db[o] += g;
            for (std::size_t i = 0; i < in_dim; ++i) {
                dw[o * in_dim + i] += g * x[r * in_dim + i];
                dx[r * in_dim + i] += g * w[o * in_dim + i];
            }
        }
    }
    return dx;
}

Rows causal_self_attention(const Rows& qkv, const Dims& d, std::uint32_t probs_site, Rows* probs) {
    const std::size_t seq = qkv.size() / (3 * d.c);
    const auto q = [&](std::size_t t, std::size_t col) { return qkv[t * 3 * d.c + col]; };
    const auto k = [&](std::size_t t, std::size_t col) { return qkv[t * 3 * d.c + d.c + col]; };
    const auto v = [&](std::size_t t, std::size_t col) { return qkv[t * 3 * d.c + 2 * d.c + col]; };
    Rows out(seq * d.c, 0.0);
    if (probs != nullptr) probs->assign(d.n_head * seq * seq, 0.0);
    std::vector<double> weight(seq);
    for (std::size_t h = 0; h < d.n_head; ++h) {
        const std::size_t col0 = h * d.hd;
        for (std::size_t t = 0; t < seq; ++t) {
            double max_score = -INFINITY;
            for (std::size_t s = 0; s <= t; ++s) {
                double dot = 0.0;
                for (std::size_t i = 0; i < d.hd; ++i) dot += q(t, col0 + i) * k(s, col0 + i);
                weight[s] = dot / std::sqrt(static_cast<double>(d.hd));
                if (weight[s] > max_score) max_score = weight[s];
            }
            double total = 0.0;
            for (std::size_t s = 0; s <= t; ++s) {
                weight[s] = std::exp(weight[s] - max_score);
                total += weight[s];
            }
            if (probs != nullptr)
                for (std::size_t s = 0; s <= t; ++s) (*probs)[(h * seq + t) * seq + s] = weight[s] / total;
            // Attention dropout on the probabilities [batch, head, t, s].
            const std::uint64_t row = (d.sequence * d.n_head + h) * seq + t;
            for (std::size_t s = 0; s <= t; ++s) weight[s] *= d.dropout.probability_factor(probs_site, row, s);
            for (std::size_t i = 0; i < d.hd; ++i) {
                double acc = 0.0;
                for (std::size_t s = 0; s <= t; ++s) acc += weight[s] / total * v(s, col0 + i);
                out[t * d.c + col0 + i] = acc;
            }
        }
    }
    return out;
}

// out[t] = Σ_s P[t,s]·m[t,s]·v[s] with P = softmax(q[t]·k[s] / √hd) over s ≤ t and m the dropout
// factor: dP[t,s] = m[t,s]·(dout[t]·v[s]); the softmax's dscore = P·(dP − Σ_s' P·dP).
Rows causal_self_attention_backward(const Rows& qkv, const Rows& probs, const Rows& dout, const Dims& d,
                                    std::uint32_t probs_site) {
    const std::size_t seq = qkv.size() / (3 * d.c);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d.hd));
    Rows dqkv(qkv.size(), 0.0);
    const auto at = [&](std::size_t t, std::size_t part, std::size_t col) { return t * 3 * d.c + part * d.c + col; };
    std::vector<double> dp(seq);
    for (std::size_t h = 0; h < d.n_head; ++h) {
        const std::size_t col0 = h * d.hd;
        for (std::size_t t = 0; t < seq; ++t) {
            const double* p = &probs[(h * seq + t) * seq];
            const std::uint64_t row = (d.sequence * d.n_head + h) * seq + t;
            double p_dot_dp = 0.0;
            for (std::size_t s = 0; s <= t; ++s) {
                const double mask = d.dropout.probability_factor(probs_site, row, s);
                double dout_v = 0.0;
                for (std::size_t i = 0; i < d.hd; ++i) {
                    dout_v += dout[t * d.c + col0 + i] * qkv[at(s, 2, col0 + i)];
                    dqkv[at(s, 2, col0 + i)] += p[s] * mask * dout[t * d.c + col0 + i];
                }
                dp[s] = mask * dout_v;
                p_dot_dp += p[s] * dp[s];
            }
            for (std::size_t s = 0; s <= t; ++s) {
                const double dscore = p[s] * (dp[s] - p_dot_dp) * scale;
                for (std::size_t i = 0; i < d.hd; ++i) {
                    dqkv[at(t, 0, col0 + i)] += dscore * qkv[at(s, 1, col0 + i)];
                    dqkv[at(s, 1, col0 + i)] += dscore * qkv[at(t, 0, col0 + i)];
                }
            }
        }
    }
    return dqkv;
}

void check_arguments(const std::string& who, const ModelConfig& m, const WeightLayout& layout, std::span<const float* const> units,
                     std::span<const std::int32_t> tokens, int batch, int seq) {
    const auto fail = [&who](const std::string& why) { throw std::invalid_argument(who + ": " + why); };
    if (const auto why = m.validate(); !why.empty()) fail(why);
    if (layout.units.size() != static_cast<std::size_t>(m.n_layer) + 2) fail("the layout does not match the model.");
    if (units.size() != layout.units.size()) {
        fail("expected " + std::to_string(layout.units.size()) + " unit pointers, got " + std::to_string(units.size()) +
             ".");
    }
    if (batch < 1 || seq < 1 || seq > m.max_positions) {
        fail("batch " + std::to_string(batch) + " × seq " + std::to_string(seq) + " is not a valid shape for model '" +
             m.name + "'.");
    }
    if (tokens.size() != static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq)) {
        fail("expected batch × seq tokens, got " + std::to_string(tokens.size()) + ".");
    }
    for (const std::int32_t tok : tokens) {
        if (tok < 0 || tok >= m.vocab_size) fail("token " + std::to_string(tok) + " is outside the vocabulary.");
    }
}

double gelu_tanh(double x) {
    const double pi = 3.14159265358979323846;
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}

double gelu_tanh_derivative(double x) {
    const double pi = 3.14159265358979323846;
    const double a = std::sqrt(2.0 / pi);
    const double th = std::tanh(a * (x + 0.044715 * x * x * x));
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * a * (1.0 + 3.0 * 0.044715 * x * x);
}

namespace {

// 1 / sqrt(mean(x²) + eps) of one row.
double row_rrms(const double* in, std::size_t width, double eps) {
    double sq = 0.0;
    for (std::size_t i = 0; i < width; ++i) sq += in[i] * in[i];
    return 1.0 / std::sqrt(sq / static_cast<double>(width) + eps);
}

double sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

// Turns each q and k pair of every row by `sign` · positions[r] · inv_freq[i].
Rows rotate_pairs(const Rows& qkv, std::span<const std::int32_t> positions, const QkvHeads& heads,
                  std::span<const double> inv_freq, double sign) {
    const std::size_t half = heads.head_dim / 2, width = (heads.n_head + 2 * heads.n_kv_head) * heads.head_dim;
    Rows out = qkv;
    for (std::size_t r = 0; r < positions.size(); ++r) {
        for (std::size_t h = 0; h < heads.n_head + heads.n_kv_head; ++h) {
            double* x = &out[r * width + h * heads.head_dim];
            for (std::size_t i = 0; i < half; ++i) {
                const double angle = static_cast<double>(positions[r]) * inv_freq[i];
                const double c = std::cos(angle), s = sign * std::sin(angle);
                const double a = x[i], b = x[i + half];
                x[i] = a * c - b * s;
                x[i + half] = b * c + a * s;
            }
        }
    }
    return out;
}

}  // namespace

Rows rms_norm(const Rows& x, std::size_t width, TensorView weight, double eps) {
    Rows y(x.size());
    for (std::size_t r = 0; r < x.size() / width; ++r) {
        const double* in = &x[r * width];
        const double rrms = row_rrms(in, width, eps);
        for (std::size_t i = 0; i < width; ++i) y[r * width + i] = in[i] * rrms * weight[i];
    }
    return y;
}

// With x̂ = x · rrms and g = dy · weight: dx = rrms · (g − x̂ · mean(g · x̂)), the mean's term
// being d rrms / dx = −rrms³ · x / width.
Rows rms_norm_backward(const Rows& x, const Rows& dy, std::size_t width, TensorView weight, double eps,
                       double* dweight) {
    Rows dx(x.size());
    for (std::size_t r = 0; r < x.size() / width; ++r) {
        const double* in = &x[r * width];
        const double* grad = &dy[r * width];
        const double rrms = row_rrms(in, width, eps);
        double mean_gx = 0.0;
        for (std::size_t i = 0; i < width; ++i) {
            dweight[i] += grad[i] * in[i] * rrms;
            mean_gx += grad[i] * weight[i] * in[i] * rrms;
        }
        mean_gx /= static_cast<double>(width);
        for (std::size_t i = 0; i < width; ++i) dx[r * width + i] = rrms * (grad[i] * weight[i] - in[i] * rrms * mean_gx);
    }
    return dx;
}

Rows swiglu(const Rows& gate, const Rows& up) {
    Rows out(gate.size());
    for (std::size_t i = 0; i < gate.size(); ++i) out[i] = gate[i] * sigmoid(gate[i]) * up[i];
    return out;
}

// silu'(z) = σ(z) · (1 + z · (1 − σ(z))).
SwigluGradients swiglu_backward(const Rows& gate, const Rows& up, const Rows& dout) {
    SwigluGradients g{Rows(gate.size()), Rows(gate.size())};
    for (std::size_t i = 0; i < gate.size(); ++i) {
        const double s = sigmoid(gate[i]);
        g.dgate[i] = dout[i] * up[i] * s * (1.0 + gate[i] * (1.0 - s));
        g.dup[i] = dout[i] * gate[i] * s;
    }
    return g;
}

Rows rope(const Rows& qkv, std::span<const std::int32_t> positions, const QkvHeads& heads,
          std::span<const double> inv_freq) {
    return rotate_pairs(qkv, positions, heads, inv_freq, 1.0);
}

// The rotation is orthogonal: its transpose, the backward, is the rotation by −angle.
Rows rope_backward(const Rows& dqkv, std::span<const std::int32_t> positions, const QkvHeads& heads,
                   std::span<const double> inv_freq) {
    return rotate_pairs(dqkv, positions, heads, inv_freq, -1.0);
}

namespace {

// Where q head h reads in a packed qkv row: its q columns and its group's k and v columns.
struct HeadColumns {
    std::size_t q0, k0, v0;
};

HeadColumns head_columns(const QkvHeads& heads, std::size_t h) {
    const std::size_t hd = heads.head_dim, k0 = (heads.n_head + h / (heads.n_head / heads.n_kv_head)) * hd;
    return {h * hd, k0, k0 + heads.n_kv_head * hd};
}

// p[s] = softmax over s ≤ t of q[t]·k[s] / √hd, for the head at `at` of the rows of qkv (width apart).
void causal_probabilities(const Rows& qkv, std::size_t width, std::size_t hd, const HeadColumns& at, std::size_t t,
                          std::vector<double>& p) {
    double max_score = -INFINITY;
    for (std::size_t s = 0; s <= t; ++s) {
        double dot = 0.0;
        for (std::size_t i = 0; i < hd; ++i) dot += qkv[t * width + at.q0 + i] * qkv[s * width + at.k0 + i];
        p[s] = dot / std::sqrt(static_cast<double>(hd));
        max_score = std::max(max_score, p[s]);
    }
    double total = 0.0;
    for (std::size_t s = 0; s <= t; ++s) total += (p[s] = std::exp(p[s] - max_score));
    for (std::size_t s = 0; s <= t; ++s) p[s] /= total;
}

}  // namespace

Rows grouped_causal_attention(const Rows& qkv, const QkvHeads& heads) {
    const std::size_t hd = heads.head_dim, width = (heads.n_head + 2 * heads.n_kv_head) * hd;
    const std::size_t seq = qkv.size() / width;
    Rows out(seq * heads.n_head * hd, 0.0);
    std::vector<double> p(seq);
    for (std::size_t h = 0; h < heads.n_head; ++h) {
        const HeadColumns at = head_columns(heads, h);
        for (std::size_t t = 0; t < seq; ++t) {
            causal_probabilities(qkv, width, hd, at, t, p);
            for (std::size_t s = 0; s <= t; ++s)
                for (std::size_t i = 0; i < hd; ++i) out[(t * heads.n_head + h) * hd + i] += p[s] * qkv[s * width + at.v0 + i];
        }
    }
    return out;
}

// Per q head h and query t, with P = softmax(q[t]·k[s] / √hd) over s ≤ t: dv[s] += P[t,s]·dout[t],
// dP[t,s] = dout[t]·v[s], dscore = P·(dP − Σ_s' P·dP) / √hd, dq[t] += dscore·k[s] and
// dk[s] += dscore·q[t], k and v being the group's kv head.
Rows grouped_causal_attention_backward(const Rows& qkv, const Rows& dout, const QkvHeads& heads) {
    const std::size_t hd = heads.head_dim, width = (heads.n_head + 2 * heads.n_kv_head) * hd;
    const std::size_t seq = qkv.size() / width, c = heads.n_head * hd;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    Rows dqkv(qkv.size(), 0.0);
    std::vector<double> p(seq), dp(seq);
    for (std::size_t h = 0; h < heads.n_head; ++h) {
        const HeadColumns at = head_columns(heads, h);
        const std::size_t q0 = at.q0, k0 = at.k0, v0 = at.v0;
        for (std::size_t t = 0; t < seq; ++t) {
            causal_probabilities(qkv, width, hd, at, t, p);
            double p_dot_dp = 0.0;
            for (std::size_t s = 0; s <= t; ++s) {
                double dout_v = 0.0;
                for (std::size_t i = 0; i < hd; ++i) {
                    const double g = dout[t * c + q0 + i];
                    dout_v += g * qkv[s * width + v0 + i];
                    dqkv[s * width + v0 + i] += p[s] * g;
                }
                dp[s] = dout_v;
                p_dot_dp += p[s] * dout_v;
            }
            for (std::size_t s = 0; s <= t; ++s) {
                const double dscore = p[s] * (dp[s] - p_dot_dp) * scale;
                for (std::size_t i = 0; i < hd; ++i) {
                    dqkv[t * width + q0 + i] += dscore * qkv[s * width + k0 + i];
                    dqkv[s * width + k0 + i] += dscore * qkv[t * width + q0 + i];
                }
            }
        }
    }
    return dqkv;
}

}  // namespace sweetspot::reference
