#pragma once
// Which fused form of the transformer block a cell computes. Every variant computes the same
// function as `baseline` (one kernel per operation); a variant is a set of fusions, each of which
// makes neighbouring operations one kernel or, for a training step, keeps other activations for
// the backward than `baseline` does (Tempo's rewrites). Presets name the sets the layer-fusion
// study measured.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/named_enum.hpp"

namespace sweetspot {

enum class Fusion : std::uint8_t {
    residual_ln,      // residual add + dropout + the next LayerNorm in one kernel
    softmax,          // causal mask + softmax + attention dropout in one kernel
    mlp_epilogue,     // the MLP's bias + GELU and its second bias in the GEMMs' epilogues
    flash_attention,  // QKᵀ, mask, online softmax and ·V in one kernel, no [seq, seq] buffer
    proj_epilogue,    // the attention's QKV and output projections' biases, the output's residual add, in epilogues
    inplace_ln,       // training: the LayerNorms' backwards from their outputs, not the residual stream (Tempo)
    inplace_gelu,     // training: the GELU's output and a branch bit per element kept, not its input (Tempo)
};

template <>
struct EnumNames<Fusion> {
    static constexpr std::array<EnumName<Fusion>, 7> list = {{{Fusion::residual_ln, "residual_ln"},
                                                             {Fusion::softmax, "softmax"},
                                                             {Fusion::mlp_epilogue, "mlp_epilogue"},
                                                             {Fusion::flash_attention, "flash_attention"},
                                                             {Fusion::proj_epilogue, "proj_epilogue"},
                                                             {Fusion::inplace_ln, "inplace_ln"},
                                                             {Fusion::inplace_gelu, "inplace_gelu"}}};
};

class Variant {
public:
    constexpr Variant() = default;
    constexpr Variant(std::initializer_list<Fusion> fusions) {
        for (const Fusion f : fusions) bits_ |= bit(f);
    }

    constexpr bool has(Fusion f) const { return (bits_ & bit(f)) != 0; }
    constexpr bool is_baseline() const { return bits_ == 0; }
    // Whether every fusion of this set is also in `allowed`.
    constexpr bool within(const Variant& allowed) const { return (bits_ & ~allowed.bits_) == 0; }
    // This set and `f`.
    constexpr Variant with(Fusion f) const {
        Variant v = *this;
        v.bits_ |= bit(f);
        return v;
    }
    constexpr bool operator==(const Variant&) const = default;

    // The preset's name when the set is a preset ("attn_ln"), else the fusions joined by '+' in
    // the order Fusion declares them ("residual_ln+mlp_epilogue"): one text per set.
    std::string text() const;
    // The fusions joined by '+' ("residual_ln+softmax"), or "none" for baseline.
    std::string fusions_text() const;
    // Fusion and preset names joined by '+' in any order, the set being their union ("tempo" alone,
    // "flash_attention+tempo"); nothing for an unknown name, an empty part, or a fusion named twice
    // (directly or through a preset).
    static std::optional<Variant> parse(std::string_view text);

private:
    static constexpr std::uint8_t bit(Fusion f) { return static_cast<std::uint8_t>(1u << static_cast<unsigned>(f)); }
    std::uint8_t bits_ = 0;
};

struct VariantPreset {
    std::string_view name;
    Variant variant;
};

// The presets, in the order the docs list them: baseline, dropout_ln, attn_ln, ffn_ln, attn_proj,
// all (every fusion of the inference forward), tempo (Tempo's rewrites of what training keeps; its
// third, regenerating dropout masks in the backward, is what every variant does: dropout.hpp).
inline constexpr std::array<VariantPreset, 7> kVariantPresets = {{
    {"baseline", {}},
    {"dropout_ln", {Fusion::residual_ln}},
    {"attn_ln", {Fusion::residual_ln, Fusion::softmax}},
    {"ffn_ln", {Fusion::residual_ln, Fusion::mlp_epilogue}},
    {"attn_proj", {Fusion::flash_attention, Fusion::proj_epilogue}},
    {"all", {Fusion::residual_ln, Fusion::softmax, Fusion::mlp_epilogue, Fusion::flash_attention, Fusion::proj_epilogue}},
    {"tempo", {Fusion::inplace_ln, Fusion::inplace_gelu}},
}};

// Every fusion there is.
inline constexpr Variant kEveryFusion = [] {
    Variant v;
    for (const auto& f : EnumNames<Fusion>::list) v = v.with(f.value);
    return v;
}();
// The fusions the GPU training step has forward and backward kernels for in some family (GPT-2's:
// gpt2_gpu_train.cu); each family's own are its FamilyCompute::gpu_training_fusions.
inline constexpr Variant kTrainingFusions{Fusion::flash_attention, Fusion::mlp_epilogue, Fusion::proj_epilogue,
                                          Fusion::inplace_ln, Fusion::inplace_gelu};
// The fusions that change only what a training step keeps for its backward: an inference forward
// computes nothing differently with them.
inline constexpr Variant kTrainingOnlyFusions{Fusion::inplace_ln, Fusion::inplace_gelu};

}  // namespace sweetspot
