#pragma once
// GPT-2's entry in the family registry (kernels/model/model_family.hpp).
#include "kernels/model/model_family.hpp"

namespace sweetspot::gpt2 {

const FamilyDecl& family();

}  // namespace sweetspot::gpt2
