#pragma once
// How a model's parameters are cut into units (embedding, one per block, head) and where each
// tensor sits inside its unit; which tensors a unit has is the model family's declaration
// (kernels/model/model_family.hpp). A unit is what a backend moves as one piece; its tensors are
// contiguous so one copy or one prefetch moves the whole layer. Matrices are row-major
// [out, in] (as nn.Linear), so y = x · Wᵀ. The parameter count and a step's model flops are
// summed from the same declarations, so each family's layout counts as it is.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/model/model_config.hpp"

namespace sweetspot {

enum class UnitKind { embedding, block, head };

// Every tensor starts on a multiple of this many elements (512 bytes in fp32) so GPU kernels
// and cuBLAS get aligned pointers whatever the hidden size.
inline constexpr std::int64_t kTensorAlignElems = 128;

struct TensorSpec {
    std::string name;             // its name in the family's checkpoints, e.g. "h.3.attn.c_attn.weight"
    std::vector<std::int64_t> shape;
    std::int64_t offset = 0;      // in elements from the start of the unit
    std::int64_t numel = 0;
};

// Whether weight decay applies to a tensor: the matrices (embeddings, linear weights, lm_head), not
// the biases or the norms' weights, as GPT-2's training recipes (llm.c, nanoGPT: every 2-D tensor)
// do. LLaMA follows the same rule: its token table, projections and untied lm_head decay, its
// RMSNorm weights do not.
inline bool decays_weights(const TensorSpec& tensor) { return tensor.shape.size() >= 2; }

struct UnitLayout {
    UnitKind kind = UnitKind::block;
    int block = -1;               // block index for UnitKind::block, else -1
    std::vector<TensorSpec> tensors;
    std::int64_t numel = 0;       // padded size of the unit in elements

    // Tensor `index`'s first element in `unit`: a unit's values laid out as this one (its weights
    // or their gradient, of any element type).
    template <class T>
    T* tensor(T* unit, int index) const {
        return unit + tensors[static_cast<std::size_t>(index)].offset;
    }
};

struct WeightLayout {
    std::vector<UnitLayout> units;  // [embedding, block 0 .. block L-1, head]
    std::int64_t total_numel = 0;

    // Both throw std::invalid_argument for a shape validate() refuses and std::overflow_error
    // when a size does not fit in 64 bits.
    static WeightLayout for_model(const ModelConfig& m);
    // for_model(m).total_numel without building a unit per block, so sizing a 16384-layer model
    // costs what sizing a 2-layer one does (every cell a matrix lists is sized).
    static std::int64_t total_numel_of(const ModelConfig& m);
    static int block_unit(int block) { return 1 + block; }
    int unit_count() const { return static_cast<int>(units.size()); }
    int head_unit() const { return unit_count() - 1; }
    // What the NVTX ranges of a unit's work call unit `unit` of a model of `units` units:
    // "embedding", "layer i" (block i) or "head"; a trace's queries join a unit's ranges by it.
    static std::string unit_name(int unit, int units);
    std::string unit_name(int unit) const { return unit_name(unit, unit_count()); }
};

// The parameters of `m`: the elements of every tensor its family declares (the layout's, less its
// padding), a head tensor that checkpoints may tie counted apart. Throws std::overflow_error when
// they do not fit in 64 bits, which ModelLimits rules out.
std::int64_t n_params(const ModelConfig& m);
// Model flops of one step over batch × seq tokens, as MFU counts them: per token, 2 per parameter
// that multiplies (all but the embedding unit's, tables a token looks up) and, per layer,
// 2·n_embd·seq for causal attention's QKᵀ and P·V (half the square); a training step (forward,
// backward) three times a forward's. llm.c counts the same for GPT-2, up to its position table.
double step_flops(const ModelConfig& m, int batch, int seq, bool training);

// A forward reads tensors by the layout's offsets, so a layout made for another shape would read
// the wrong bytes without crashing: throws std::invalid_argument, naming `who`, unless `layout`
// has the shapes WeightLayout::for_model(model) gives.
void require_layout_for(const ModelConfig& model, const WeightLayout& layout, const std::string& who);

}  // namespace sweetspot
