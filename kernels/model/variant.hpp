#pragma once
// Which fused form of the transformer block a cell computes. Every variant computes the same
// function as `baseline`; they differ in which neighbouring operations one kernel does together.
#include "kernels/model/named_enum.hpp"

namespace sweetspot {

enum class Variant { baseline, dropout_ln, attn_ln, ffn_ln, attn_proj, all };

template <>
struct EnumNames<Variant> {
    static constexpr std::array<EnumName<Variant>, 6> list = {{{Variant::baseline, "baseline"},
                                                              {Variant::dropout_ln, "dropout_ln"},
                                                              {Variant::attn_ln, "attn_ln"},
                                                              {Variant::ffn_ln, "ffn_ln"},
                                                              {Variant::attn_proj, "attn_proj"},
                                                              {Variant::all, "all"}}};
};

}  // namespace sweetspot
