#pragma once
// One GPU op, declared once: its shapes, its tolerance per dtype, its cost, and how to run it on
// the GPU and check it against its CPU operation (kernels/compute/cpu_ops.hpp, fp32 on inputs
// rounded to the dtype). The [gpu] test (test_ops.cpp) and the kernel benchmark
// (bench_kernels.cpp) are both made from the list of entries (op_registry.cpp), so an op that is
// tested is benchmarked and the other way round.
//
// An entry lives in the tests/ops file of its family (layernorm_ops.cpp beside
// kernels/compute/layernorm.cu), forward and backward side by side; op_support.hpp has what the
// entries share (inputs, device arrays, the comparison, the tolerances' building blocks).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/model/dtype.hpp"

namespace sweetspot::ops {

// A shape the entry knows how to read: its own named dimensions, in its own order (op_shape()
// makes both fields from one list).
struct OpShape {
    std::vector<std::int64_t> dims;
    std::string text;  // "rows 13 c 75", for messages and the benchmark table
};

// What one run of the op does, for the benchmark's rates: model flops (0 for a memory-bound op,
// which is then reported in GB/s) and the bytes it must read and write at the least.
struct OpCost {
    double flops = 0;
    double bytes = 0;
};

// How the GPU's outputs compare with the CPU's: max |gpu − cpu| / max |cpu| over each output
// (the largest of them is the verdict), and the NaN or infinite values the GPU wrote.
struct OpError {
    double rel_err = 0;
    std::size_t nonfinite = 0;
    std::string worst;  // which output gave rel_err and its magnitudes, e.g. "dw: max |gpu - cpu| ..."

    // Adds another output's comparison: the larger error decides, the non-finite values add up.
    void include(const OpError& other);
};

// One shape in one dtype: inputs made (seeded, non-zero, rounded to the dtype) and uploaded,
// outputs allocated, once.
class OpCase {
public:
    virtual ~OpCase() = default;
    // Enqueues the op on `stream`. The benchmark calls it repeatedly; an op that works in place
    // or accumulates then runs on its own last output, which changes the values but not the work.
    virtual void run(cudaStream_t stream) = 0;
    // After exactly one run: waits for it, fetches the outputs, runs the CPU operation on the same
    // inputs and compares.
    virtual OpError check(cudaStream_t stream) = 0;
};

struct OpEntry {
    std::string name;    // "layernorm_backward"
    std::string family;  // "layernorm": kernels/compute/layernorm.cu
    std::vector<OpShape> test_shapes;   // odd sizes: partial warps, one row, past grid caps
    std::vector<OpShape> bench_shapes;  // the models' sizes
    std::vector<DType> dtypes = {DType::fp32, DType::fp16, DType::bf16};
    std::function<double(DType)> tolerance;  // the largest rel_err that passes, with why in the entry
    // Bytes depend on the dtype's size, flops do not.
    std::function<OpCost(const OpShape&, DType)> cost;
    // Inputs uploaded and outputs allocated through `stream` (synchronized before it returns).
    std::function<std::unique_ptr<OpCase>(const OpShape&, DType, cudaStream_t)> make;
};

// Every entry of every family, in the order of the families below.
const std::vector<OpEntry>& op_entries();

// One function per family, defined in tests/ops/<family>_ops.cpp.
// Element-wise and row-wise ops (opsframe):
std::vector<OpEntry> embedding_ops();
std::vector<OpEntry> layernorm_ops();
std::vector<OpEntry> bias_ops();
std::vector<OpEntry> gelu_ops();
std::vector<OpEntry> residual_ops();
std::vector<OpEntry> dropout_ops();
std::vector<OpEntry> softmax_ops();
std::vector<OpEntry> count_nonfinite_ops();

// Fused classifier (classop):
std::vector<OpEntry> classifier_ops();

// Optimizer and gradient norm (classop):
std::vector<OpEntry> optimizer_ops();

// Attention (flashbwd):
std::vector<OpEntry> attention_ops();

// A linear layer's products and the training step's GEMM epilogues:
std::vector<OpEntry> gemm_ops();

// LLaMA's ops (rmsnorm.cu, swiglu.cu, rope.cu):
std::vector<OpEntry> rmsnorm_ops();
std::vector<OpEntry> swiglu_ops();
std::vector<OpEntry> rope_ops();

}  // namespace sweetspot::ops
