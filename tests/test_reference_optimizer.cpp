// The float64 reference's gradient clipping and AdamW step against values worked by hand.
#include <cmath>
#include <vector>

#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include "kernels/compute/reference_optimizer.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"
#include "kernels/compute/cpu_train_step.hpp"
#include "kernels/model/llama/llama_tensors.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/weight_layout.hpp"

using namespace sweetspot;
using Catch::Approx;

TEST_CASE("gradient clipping scales the global norm down to the limit and leaves smaller ones", "[kernels][optimizer]") {
    UnitValues grads{{3.0, 0.0}, {4.0}};  // norm 5
    CHECK(reference_clip_gradients(grads, 1.0) == Approx(5.0).epsilon(1e-15));
    CHECK(grads[0][0] == Approx(3.0 / 5.000001).epsilon(1e-15));  // max_norm / (norm + 1e-6)
    CHECK(grads[0][1] == 0.0);
    CHECK(grads[1][0] == Approx(4.0 / 5.000001).epsilon(1e-15));
    UnitValues small{{0.3}, {0.4}};  // norm 0.5
    CHECK(reference_clip_gradients(small, 1.0) == Approx(0.5).epsilon(1e-15));
    CHECK(small == UnitValues{{0.3}, {0.4}});
    // max_norm 0: no clipping, however large the norm.
    UnitValues large{{30.0}, {40.0}};  // norm 50
    CHECK(reference_clip_gradients(large, 0.0) == Approx(50.0).epsilon(1e-15));
    CHECK(large == UnitValues{{30.0}, {40.0}});
}

TEST_CASE("TrainSettings::clip_scale is clip_grad_norm_'s factor, and 1 without clipping", "[kernels][optimizer]") {
    TrainSettings s;
    s.max_grad_norm = 2.0f;
    CHECK(s.clip_scale(8.0) == Approx(2.0 / 8.000001).epsilon(1e-15));
    CHECK(s.clip_scale(1.5) == 1.0);
    s.max_grad_norm = 0.0f;
    CHECK(s.clip_scale(8.0) == 1.0);
    CHECK(s.clip_scale(1e30) == 1.0);
}

TEST_CASE("weight decay takes the matrices, embeddings and heads included, never a norm's weight or a bias",
          "[kernels][optimizer]") {
    // As GPT-2's AdamW groups (llm.c, nanoGPT: every 2-D tensor) and so LLaMA's: the token table,
    // the attention's and the MLP's projections and the untied lm_head decay; the RMSNorms do not.
    const auto layout = WeightLayout::for_model(*find_builtin_model("tiny_llama"));
    const auto decays = [&](int unit, int tensor) {
        return decays_weights(layout.units[static_cast<std::size_t>(unit)].tensors[static_cast<std::size_t>(tensor)]);
    };
    const int block = WeightLayout::block_unit(1), head = layout.head_unit();
    CHECK(decays(0, llama::embed_tensor::tokens));
    for (const int t : {llama::block_tensor::q_w, llama::block_tensor::k_w, llama::block_tensor::v_w,
                        llama::block_tensor::o_w, llama::block_tensor::gate_w, llama::block_tensor::up_w,
                        llama::block_tensor::down_w})
        CHECK(decays(block, t));
    CHECK_FALSE(decays(block, llama::block_tensor::attn_norm));
    CHECK_FALSE(decays(block, llama::block_tensor::mlp_norm));
    CHECK_FALSE(decays(head, llama::head_tensor::norm));
    CHECK(decays(head, llama::head_tensor::lm_head));
    const auto gpt2_layout = WeightLayout::for_model(*find_builtin_model("tiny"));
    CHECK(decays_weights(gpt2_layout.units[0].tensors[gpt2::embed_tensor::wte]));
    CHECK(decays_weights(gpt2_layout.units[0].tensors[gpt2::embed_tensor::wpe]));
}

TEST_CASE("AdamW: bias-corrected moments and decoupled decay of the matrices only, over two steps",
          "[kernels][optimizer]") {
    const ModelConfig m{"adamw_check", 1, 6, 2, 13, 8, 1e-5f};
    const auto layout = WeightLayout::for_model(m);
    const UnitLayout& block = layout.units[static_cast<std::size_t>(WeightLayout::block_unit(0))];
    const auto at = [&](int tensor) { return static_cast<std::size_t>(block.tensors[static_cast<std::size_t>(tensor)].offset); };
    CHECK(decays_weights(block.tensors[gpt2::block_tensor::qkv_w]));
    CHECK_FALSE(decays_weights(block.tensors[gpt2::block_tensor::qkv_b]));
    CHECK_FALSE(decays_weights(block.tensors[gpt2::block_tensor::ln1_w]));

    UnitValues params, grads;
    for (const UnitLayout& unit : layout.units) {
        params.emplace_back(static_cast<std::size_t>(unit.numel), 0.5);
        grads.emplace_back(static_cast<std::size_t>(unit.numel), 0.0);
    }
    const auto u = static_cast<std::size_t>(WeightLayout::block_unit(0));
    grads[u][at(gpt2::block_tensor::qkv_w)] = 0.2;
    grads[u][at(gpt2::block_tensor::qkv_b)] = 0.2;
    const AdamWSettings s{.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    AdamWState state;
    reference_adamw_step(layout, params, grads, state, s);
    // Step 1: m̂ = g and v̂ = g², so the update is lr·g / (|g| + eps); the matrix also loses lr·wd of itself.
    CHECK(params[u][at(gpt2::block_tensor::qkv_w)] == Approx(0.4895000005).epsilon(1e-12));  // 0.5 − 0.0005 − 0.0099999995
    CHECK(params[u][at(gpt2::block_tensor::qkv_b)] == Approx(0.4900000005).epsilon(1e-12));
    CHECK(params[u][at(gpt2::block_tensor::qkv_w) + 1] == Approx(0.4995).epsilon(1e-12));  // no gradient: decay alone
    CHECK(params[u][at(gpt2::block_tensor::qkv_b) + 1] == 0.5);                            // no gradient, no decay
    CHECK(state.step == 1);

    grads[u][at(gpt2::block_tensor::qkv_b)] = -0.1;
    reference_adamw_step(layout, params, grads, state, s);
    // Step 2 of the bias: m = 0.9·0.02 − 0.01 = 0.008, v = 0.95·0.002 + 0.0005 = 0.0024;
    // 0.4900000005 − 0.01·(0.008 / 0.19) / (√(0.0024 / 0.0975) + 1e-8).
    CHECK(params[u][at(gpt2::block_tensor::qkv_b)] == Approx(0.487316306190214).epsilon(1e-12));
    CHECK(state.m[u][at(gpt2::block_tensor::qkv_b)] == Approx(0.008).epsilon(1e-12));
    CHECK(state.v[u][at(gpt2::block_tensor::qkv_b)] == Approx(0.0024).epsilon(1e-12));
}
