#pragma once
// How a packed qkv row holds its heads: n_head q heads, then n_kv_head k heads, then n_kv_head v
// heads, each head_dim wide. GPT-2's multi-head attention is n_kv_head = n_head ([q | k | v], 3C a
// row); grouped-query attention (LLaMA) shares each kv head among n_head / n_kv_head q heads, q
// head h reading kv head h / group. Host code and kernels compute the columns from this one value.
#include <cstdint>

#include "base/host_device.hpp"

namespace sweetspot {

struct QkvHeads {
    int n_head = 0, n_kv_head = 0, head_dim = 0;

    // Multi-head attention over c columns of q.
    static QkvHeads multi_head(int c, int n_head) { return {n_head, n_head, c / n_head}; }

    SWEETSPOT_HOST_DEVICE int c() const { return n_head * head_dim; }  // q's columns, and the output's
    SWEETSPOT_HOST_DEVICE std::int64_t ld() const {
        return (static_cast<std::int64_t>(n_head) + 2 * static_cast<std::int64_t>(n_kv_head)) * head_dim;
    }
    SWEETSPOT_HOST_DEVICE std::int64_t q_col(int h) const { return static_cast<std::int64_t>(h) * head_dim; }
    SWEETSPOT_HOST_DEVICE std::int64_t k_col(int h) const {
        return (static_cast<std::int64_t>(n_head) + h / (n_head / n_kv_head)) * head_dim;
    }
    SWEETSPOT_HOST_DEVICE std::int64_t v_col(int h) const {
        return k_col(h) + static_cast<std::int64_t>(n_kv_head) * head_dim;
    }
};

}  // namespace sweetspot
