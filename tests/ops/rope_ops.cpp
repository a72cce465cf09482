// RoPE's entries: the forward (launch_rope) and the backward (launch_rope_backward), each in
// place on a packed qkv.
#include <cstdint>
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/rope.cuh"
#include "kernels/compute/rope_frequencies.hpp"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

// LLaMA 3.2 1B's frequencies (theta 500000, Llama 3 scaling by 32 over 8192 positions) and
// Llama 2's (theta 10000, none), with the context each was trained for.
struct RopeModel {
    double theta;
    RopeScaling scaling;
    int context;
};
RopeModel rope_model(bool llama3) {
    if (!llama3) return {10000.0, {}, 4096};
    return {500000.0,
            {.factor = 32, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_positions = 8192, .enabled = true},
            131072};
}

// Positions spread over the model's context (past 105615 with Llama 3: the device sincosf's slow
// range reduction), not in order: any row may hold any position.
std::vector<std::int32_t> spread_positions(int rows, int context) {
    std::vector<std::int32_t> p(as_size(rows));
    for (std::size_t r = 0; r < p.size(); ++r)
        p[r] = static_cast<std::int32_t>((static_cast<std::int64_t>(r) * 7919 + 4093) % context);
    return p;
}

// dims: rows, n_head, n_kv_head, head_dim, llama3 (1: LLaMA 3.2 1B's frequencies, 0: Llama 2's).
// With `backward`, launch_rope_backward on the same kind of input (a dqkv).
template <class T>
class RopeCase final : public OpCase {
public:
    RopeCase(const OpShape& shape, cudaStream_t stream, bool backward)
        : backward_(backward),
          rows_(static_cast<int>(shape.dims[0])),
          n_head_(static_cast<int>(shape.dims[1])),
          n_kv_(static_cast<int>(shape.dims[2])),
          hd_(static_cast<int>(shape.dims[3])),
          model_(rope_model(shape.dims[4] != 0)),
          positions_(spread_positions(rows_, model_.context)),
          inv_freq_(rope_inv_frequencies_f32(hd_, model_.theta, model_.scaling)),
          qkv_(random_values(as_size(rows_) * as_size((n_head_ + 2 * n_kv_) * hd_), dtype, kSeed, 0.01f, 2.0f,
                             Sign::either)),
          d_positions_(positions_, stream),
          d_inv_freq_(inv_freq_, stream),
          d_qkv_(qkv_, stream) {}

    void run(cudaStream_t stream) override {
        const auto launch = backward_ ? gpu::launch_rope_backward<T> : gpu::launch_rope<T>;
        launch(d_qkv_.get(), d_positions_.get(), d_inv_freq_.get(), rows_, n_head_, n_kv_, hd_, stream);
    }

    // The whole of qkv: v must come back as it went.
    OpError check(cudaStream_t stream) override {
        std::vector<float> want = qkv_;
        const auto turn = backward_ ? cpu::rope_backward : cpu::rope;
        turn(want.data(), positions_.data(), inv_freq_.data(), rows_, n_head_, n_kv_, hd_);
        return compare("qkv", d_qkv_.to_host(stream), want);
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();

    bool backward_;
    int rows_, n_head_, n_kv_, hd_;
    RopeModel model_;
    std::vector<std::int32_t> positions_;
    std::vector<float> inv_freq_, qkv_;
    DeviceTokens d_positions_;
    DeviceArray<float> d_inv_freq_;
    DeviceArray<T> d_qkv_;
};

OpShape rope_shape(int rows, int n_head, int n_kv_head, int head_dim, bool llama3) {
    return op_shape({{"rows", rows}, {"heads", n_head}, {"kv_heads", n_kv_head}, {"hd", head_dim},
                     {"llama3", llama3 ? 1 : 0}});
}

// One row; 17 rows, the last positions past 105615; head_dim 48 and 80 (whole 16-byte packs of pairs in every dtype), 20 (head_dim/2 = 10:
// single elements), 24 (packs in fp32, single elements in fp16 and bf16); LLaMA 3.2 1B's heads
// and Llama 2 7B's; 80 heads of 256 and 72 of 14, more pair groups than a block's 256 threads.
const std::vector<OpShape> kTestShapes = {
    rope_shape(1, 2, 1, 48, false),   rope_shape(17, 4, 2, 80, true),  rope_shape(7, 3, 1, 20, false),
    rope_shape(5, 2, 2, 24, true),    rope_shape(9, 32, 8, 64, true),  rope_shape(3, 32, 32, 128, false),
    rope_shape(4, 40, 40, 256, false), rope_shape(5, 64, 8, 14, true)};

// 8192 rows (batch 4 × seq 2048): LLaMA 3.2 1B (32 heads, 8 kv heads, head_dim 64) and Llama 2 7B
// (32 and 32 of 128).
const std::vector<OpShape> kBenchShapes = {rope_shape(8192, 32, 8, 64, true), rope_shape(8192, 32, 32, 128, false)};

// Reads and writes q and k; reads each row's position.
OpCost rope_cost(const OpShape& s, DType dtype) {
    OpCost cost = memory_cost(2.0 * static_cast<double>(s.dims[0] * (s.dims[1] + s.dims[2]) * s.dims[3]), dtype);
    cost.bytes += 4.0 * static_cast<double>(s.dims[0]);
    return cost;
}

}  // namespace

std::vector<OpEntry> rope_ops() {
    std::vector<OpEntry> entries;
    for (const bool backward : {false, true}) {
        entries.push_back(OpEntry{
            .name = backward ? "rope_backward" : "rope",
            .family = "rope",
            .test_shapes = kTestShapes,
            .bench_shapes = kBenchShapes,
            // One store of x·cos ∓ y·sin. Both sides compute the same fp32 angle (a product of the
            // same fp32 values) and cos and sin of it within 2 ulp (device) and 1 (glibc); the
            // device may fuse a multiply-add: ~1e-7 of the result.
            .tolerance = store_tolerance,
            .cost = rope_cost,
            .make = [backward](const OpShape& s, DType dtype, cudaStream_t stream) {
                return make_case<RopeCase>(dtype, s, stream, backward);
            },
        });
    }
    return entries;
}

}  // namespace sweetspot::ops
