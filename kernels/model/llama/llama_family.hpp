#pragma once
// LLaMA's entry in the family registry (kernels/model/model_family.hpp).
#include "kernels/model/model_family.hpp"

namespace sweetspot::llama {

const FamilyDecl& family();

}  // namespace sweetspot::llama
