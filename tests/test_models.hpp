#pragma once
// Models the tests share: a built-in model by name, and the shapes no built-in model has.
#include <catch2/catch_test_macros.hpp>

#include "kernels/model/model_config.hpp"

namespace sweetspot::test {

inline ModelConfig builtin(const char* name) {
    const auto m = find_builtin_model(name);
    REQUIRE(m.has_value());
    return *m;
}

// A LLaMA-shaped model with head dimension 80 (the tensor-core kernels' odd one) and 3 kv heads
// for 6 query heads.
inline ModelConfig llama_hd80() {
    ModelConfig m = builtin("tiny_llama");
    m.name = "llama_hd80";
    m.n_layer = 1;
    m.n_embd = 480;
    m.n_head = 6;
    m.n_kv_head = 3;
    m.ffn_hidden = 96;
    m.vocab_size = 64;
    return m;
}

}  // namespace sweetspot::test
