#pragma once
// What a training step's backward computes again instead of the forward keeping it, as Megatron's
// selective recomputation and, at the end, whole-block checkpointing: a ladder, each setting
// recomputing what the one before it does and more, each trading device memory for time. Every
// setting computes the same gradients: the backward recomputes with the forward's own kernels, on
// the same inputs, with the same dropout masks (regenerated from their seed, site and position).
// One exception, within a rounding: under mlp_epilogue, gelu and attention recompute the GELU's
// output with the GELU kernel from the kept pre-activation, where the forward (and so none, mlp
// and block) took it from the GEMM's epilogue.
//
// Per block and row of the batch, in the dtype (C = n_embd), the forward keeps:
//   none       ln_1's output (C), qkv (3C), the attention's output (C, with flash attention each
//              row's fp32 logsumexp), x_mid (C), ln_2's output (C), the MLP's pre-activation (4C)
//              and the GELU's output (4C), the block's output (C): 16C;
//   gelu       all of that but the GELU's output, recomputed from the pre-activation (llm.c's
//              recompute 1): 12C;
//   attention  and not the attention's output and logsumexp, recomputed from the kept qkv
//              (Megatron's selective recomputation of the core attention): 11C;
//   mlp        and not ln_2's output nor the pre-activation: ln_2, the MLP's first GEMM and its
//              GELU run again from the kept x_mid (ln_2's backward needs x_mid anyway, and
//              keeping ln_2's output would save one cheap LayerNorm for as many bytes): 6C;
//   block      only the block's output (the next block's input): the whole forward of a block
//              runs again in its backward from its kept input, but for the MLP's output
//              projection, whose result is already kept: 1C.
// What a setting recomputes lives in one scratch buffer shared by every layer.
//
// With the inplace_ln variant, the LayerNorms' backwards read their outputs (kept above: the next
// GEMMs' inputs) and each row's fp32 rstd instead of their inputs, so the residual stream is kept
// only where a setting recomputes from it. Per block and row:
//   none, gelu, attention  not x_mid nor the block's input: 2C less (14C, 10C, 9C), and ln_1's
//              and ln_2's rstd (4 bytes each) more;
//   mlp        ln_2's output instead of x_mid, the MLP's first GEMM and GELU running again from it
//              (ln_2 no longer does), and not the block's input: 5C and the two rstd;
//   block      the block's input, as without inplace_ln (ln_1 and ln_2 run again, writing their
//              rstd into the scratch): 1C.
// The stream the backward does not read (x_mid; each block's output but where block keeps it as
// the next one's input) is one scratch buffer each, shared by every layer: a block writes its
// output when its input is dead. ln_f keeps its rstd and not its input, the last block's output.
//
// With the inplace_gelu variant the forward keeps the GELU's output and one bit per element
// (gelu_from_output.hpp), C/2 bytes a row, in place of the pre-activation and the output; its
// backward reads those two, so gelu and attention have nothing to recompute for the GELU:
//   none, gelu 12C and the bits (gelu keeps what none keeps);
//   attention  11C and the bits;
//   mlp        6C: ln_2, the first GEMM and the GELU run again from x_mid into the scratch, the
//              output and the bits with them;
//   block      1C.
// And every setting takes the GELU's output from the same kernel, under mlp_epilogue too (whose
// first GEMM then adds the bias only).
// The two compose: with both, a setting keeps inplace_ln's residual stream and rstd, and
// inplace_gelu's output and bits for the GELU's (mlp then runs the first GEMM and the in-place
// GELU again from ln_2's kept output).
//
// LLaMA's block (F its MLP's width, Q its packed qkv row, (H + 2·KV)·hd) climbs the same ladder,
// its SwiGLU in the GELU's place. Per block and row the forward keeps:
//   none       attn_norm's output (C), qkv (Q), the attention's output (C, with flash attention
//              each row's fp32 logsumexp), x_mid (C), mlp_norm's output (C), gate and up (2F),
//              SwiGLU's output (F), the block's output (C): 5C + Q + 3F;
//   gelu       all of that but SwiGLU's output, recomputed from the kept gate and up: 5C + Q + 2F;
//   attention  and not the attention's output and logsumexp: 4C + Q + 2F;
//   mlp        and not mlp_norm's output, gate nor up: mlp_norm, gate, up and SwiGLU run again
//              from the kept x_mid: 3C + Q;
//   block      only the block's output: C.
// inplace_ln and inplace_gelu are GPT-2's LayerNorm and GELU: LLaMA trains without them.
#include <array>

#include "base/named_enum.hpp"

namespace sweetspot {

// In the ladder's order: a later setting recomputes everything an earlier one does.
enum class Recompute { none, gelu, attention, mlp, block };

template <>
struct EnumNames<Recompute> {
    static constexpr std::array<EnumName<Recompute>, 5> list = {{{Recompute::none, "none"},
                                                                {Recompute::gelu, "gelu"},
                                                                {Recompute::attention, "attention"},
                                                                {Recompute::mlp, "mlp"},
                                                                {Recompute::block, "block"}}};
};

// Whether `recompute` keeps ln_2's output, or runs ln_2 again before the MLP's recomputation:
// without inplace_ln the MLP's recomputation starts from the kept x_mid, with it from ln_2's
// kept output (above).
constexpr bool keeps_ln2_output(Recompute recompute, bool inplace_ln) {
    return recompute < (inplace_ln ? Recompute::block : Recompute::mlp);
}

}  // namespace sweetspot
