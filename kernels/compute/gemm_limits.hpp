#pragma once
// What the GEMM epilogues (gemm.hpp) can take, in a header without CUDA, so that a build without
// it can still say why a cell cannot run.

namespace sweetspot {

// cuBLASLt's auxiliary buffer (the pre-activation the GELU epilogue stores and its backward's
// DGELU epilogue reads) needs a leading dimension that is a multiple of 8 elements.
inline constexpr bool gemm_aux_width_fits(int width) { return width % 8 == 0; }

}  // namespace sweetspot
