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

// tiny_llama reshaped: `name`, its layers, hidden size, heads, kv heads, MLP width and vocabulary.
inline ModelConfig llama_shaped(const char* name, int layers, int n_embd, int n_head, int n_kv_head, int ffn, int vocab) {
    ModelConfig m = builtin("tiny_llama");
    m.name = name;
    m.n_layer = layers;
    m.n_embd = n_embd;
    m.n_head = n_head;
    m.n_kv_head = n_kv_head;
    m.ffn_hidden = ffn;
    m.vocab_size = vocab;
    return m;
}

// A LLaMA-shaped model with head dimension 80 (the tensor-core kernels' odd one) and 3 kv heads
// for 6 query heads.
inline ModelConfig llama_hd80() { return llama_shaped("llama_hd80", 1, 480, 6, 3, 96, 64); }

// A LLaMA-shaped model with multi-head attention (a kv head per head) at head dimension 32.
inline ModelConfig llama_mha() { return llama_shaped("llama_mha", 2, 64, 2, 2, 96, 97); }

}  // namespace sweetspot::test
