#include "kernels/compute/layernorm.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/device_common.cuh"
#include "kernels/compute/elementwise.cuh"
#include "kernels/compute/layernorm_recovery.hpp"

namespace sweetspot::gpu {

namespace {

// One warp per row (llm.c layernorm_forward_kernel3): rows are short (c ≤ a few thousand),
// so a warp-shuffle reduction needs no shared memory and no block barrier. Two passes in fp32,
// mean then centred squares, as the CPU reference: no E[x²] − E[x]² cancellation. The row is
// re-read from global memory (L1/L2 hits) instead of being held in registers, so any c works.
// Where rstd_out is not null, lane 0 writes the row's rstd there (inplace_ln's backward reads it).
template <class T>
__global__ void layernorm_kernel(T* out, float* rstd_out, const T* in, const T* w, const T* b, int rows, int c,
                                 float eps) {
    const int warps_per_block = static_cast<int>(blockDim.x) / kWarp;
    const int row = static_cast<int>(blockIdx.x) * warps_per_block + static_cast<int>(threadIdx.x) / kWarp;
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    if (row >= rows) return;  // the whole warp leaves together, so the shuffles stay full-mask
    const T* x = in + static_cast<std::int64_t>(row) * c;
    T* y = out + static_cast<std::int64_t>(row) * c;

    float sum = 0.0f;
    for (int i = lane; i < c; i += kWarp) sum += to_f32(x[i]);
    const float mean = warp_sum(sum) / static_cast<float>(c);

    float sq = 0.0f;
    for (int i = lane; i < c; i += kWarp) {
        const float d = to_f32(x[i]) - mean;
        sq += d * d;
    }
    const float var = warp_sum(sq) / static_cast<float>(c);
    const float rstd = 1.0f / sqrtf(var + eps);
    if (rstd_out != nullptr && lane == 0) rstd_out[row] = rstd;

    for (int i = lane; i < c; i += kWarp) {
        y[i] = from_f32<T>((to_f32(x[i]) - mean) * rstd * to_f32(w[i]) + to_f32(b[i]));
    }
}

// The backward takes x̂ from the forward's input x (`in`; the row's mean and rstd recomputed from
// it) or, with kFromOutput (inplace_ln), from its output y (`in`), the bias b and the rstd the
// forward kept: x̂ = (y − b) / w (layernorm_recovery.hpp). Where some |w_j| is too small to divide
// by, the kernel writes `tag` to *unrecoverable. Unused without kFromOutput.
template <class T>
struct FromOutput {
    const T* b = nullptr;
    const float* rstd = nullptr;
    int* unrecoverable = nullptr;
    int tag = 0;
};

template <bool kFromOutput>
__device__ __forceinline__ float normalized(float v, float w, float b, float mean, float rstd) {
    if constexpr (kFromOutput) return ln_normalized_from_output(v, w, b);
    else return (v - mean) * rstd;
}

// Block 0 checks every channel's weight once: no other block writes the flag.
template <bool kFromOutput, class T>
__device__ void report_unrecoverable(const T* w, int c, const FromOutput<T>& src) {
    if constexpr (kFromOutput) {
        if (blockIdx.x != 0) return;
        for (int i = static_cast<int>(threadIdx.x); i < c; i += static_cast<int>(blockDim.x))
            if (!ln_weight_recoverable(to_f32(w[i]))) *src.unrecoverable = src.tag;
    }
}

// The backward's fast path, one warp per row: the row's x and dy are loaded once, 16 bytes a
// lane at a time, and held in registers (lane l owns packs l, l + 32, ... of the row: kChunks of
// them), so every reduction is a warp shuffle and nothing but dx is read twice. Per row: the
// forward's mean and rstd (two passes, as layernorm_kernel), then mean(dy·w) and mean(dy·w·x̂),
// then dx += rstd · (dy·w − mean(dy·w) − x̂ · mean(dy·w·x̂)), with x̂ = (x − mean) · rstd. A lane
// owns the same columns in every row, so each warp adds its rows' dy·x̂ and dy into sums of its
// own in shared memory without atomics, in row order; the block is persistent (rows blockIdx.x ·
// warps + warp, then + gridDim.x · warps, ...) and at the end adds its warps' sums in warp order
// into one partial row, [dw c | db c] of partials [gridDim.x, 2c]: few blocks, few partials.
// A warp's sums are float4 slots (k · kQuads + h) · 32 + l for quad h (values 4h .. 4h + 3) of
// its pack k, so that a
// warp's access is 32 consecutive float4s (no bank conflicts). Shared memory:
// backward_shared_bytes.
template <class T>
struct alignas(16) Pack {
    static constexpr int kSize = 16 / static_cast<int>(sizeof(T));
    T v[kSize];
};

// An empty asm that claims to change p's four words: values the compiler derived from p before
// this point (the fp32 x, x̂ and dy·w of a pass) cannot be reused after it, so each pass converts
// the packed row again instead of keeping 2× (fp16, bf16) its registers in fp32 from pass to pass,
// which quads the warps an SM holds.
template <class T>
__device__ __forceinline__ void forget_derived(Pack<T>& p) {
    auto* words = reinterpret_cast<unsigned*>(&p);
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(words[i]));
}

constexpr int kBackwardWarps = kBlock / kWarp;
// Packs a lane holds at most (kChunks), so that x and dy fit its registers: rows of 512 packs.
constexpr int kMaxBackwardChunks = 16;

// float4 slots of one warp's dw sums (and as many for its db) for rows of `packs` packs.
__host__ __device__ constexpr int backward_slots(int packs, int quads) {
    return (packs + kWarp - 1) / kWarp * kWarp * quads;
}

template <class T>
std::size_t backward_shared_bytes(int c) {
    const int packs = c / Pack<T>::kSize;
    return static_cast<std::size_t>(kBackwardWarps) * 2 * backward_slots(packs, Pack<T>::kSize / 4) * sizeof(float4);
}

template <class T, int kChunks, bool kFromOutput>
__global__ void __launch_bounds__(kBlock, kChunks <= 8 ? 2 : 1)
    layernorm_backward_warp_kernel(T* __restrict__ dx, float* __restrict__ partials, const T* __restrict__ dout,
                                   const T* __restrict__ in, FromOutput<T> src, const T* __restrict__ w, int rows,
                                   int c, float eps) {
    using P = Pack<T>;
    constexpr int kQuads = P::kSize / 4;  // float4s per pack: 1 (fp32) or 2
    extern __shared__ float4 sums[];
    const int lane = static_cast<int>(threadIdx.x) % kWarp, warp = static_cast<int>(threadIdx.x) / kWarp;
    const int packs = c / P::kSize, slots = backward_slots(packs, kQuads);
    float4* dw_sum = sums + static_cast<std::ptrdiff_t>(warp) * 2 * slots;
    float4* db_sum = dw_sum + slots;
    // Lane l only ever touches slots ≡ l (mod 32): no barrier between the zeroing and the sums.
    for (int s = lane; s < slots; s += kWarp) dw_sum[s] = db_sum[s] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    report_unrecoverable<kFromOutput>(w, c, src);
    const P* wp = reinterpret_cast<const P*>(w);
    const P* bp = reinterpret_cast<const P*>(src.b);

    for (int row = static_cast<int>(blockIdx.x) * kBackwardWarps + warp; row < rows;
         row += static_cast<int>(gridDim.x) * kBackwardWarps) {
        const std::int64_t first = static_cast<std::int64_t>(row) * packs;
        const P* xp = reinterpret_cast<const P*>(in) + first;
        const P* dyp = reinterpret_cast<const P*>(dout) + first;
        P* dxp = reinterpret_cast<P*>(dx) + first;

        P x[kChunks], dy[kChunks];
#pragma unroll
        for (int k = 0; k < kChunks; ++k) {
            const int p = k * kWarp + lane;
            if (p < packs) {
                x[k] = xp[p];
                dy[k] = dyp[p];
            }
        }
        float mean = 0.0f, rstd = 0.0f;
        if constexpr (kFromOutput) {
            rstd = src.rstd[row];
        } else {
            float sum = 0.0f;
#pragma unroll
            for (int k = 0; k < kChunks; ++k) {
                if (k * kWarp + lane >= packs) continue;
#pragma unroll
                for (int e = 0; e < P::kSize; ++e) sum += to_f32(x[k].v[e]);
            }
            mean = warp_sum(sum) / static_cast<float>(c);
            float sq = 0.0f;
#pragma unroll
            for (int k = 0; k < kChunks; ++k) {
                if (k * kWarp + lane >= packs) continue;
#pragma unroll
                for (int e = 0; e < P::kSize; ++e) {
                    const float d = to_f32(x[k].v[e]) - mean;
                    sq += d * d;
                }
            }
            rstd = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(c) + eps);
        }

        float g = 0.0f, gx = 0.0f;
#pragma unroll
        for (int k = 0; k < kChunks; ++k) {
            const int p = k * kWarp + lane;
            if (p >= packs) continue;
            forget_derived(x[k]);
            const P wk = wp[p];
            const P bk = kFromOutput ? bp[p] : P{};
#pragma unroll
            for (int h = 0; h < kQuads; ++h) {
                const int slot = (k * kQuads + h) * kWarp + lane;
                float4 dw4 = dw_sum[slot], db4 = db_sum[slot];
                float* dwv = &dw4.x;
                float* dbv = &db4.x;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int e = h * 4 + j;
                    const float xhat =
                        normalized<kFromOutput>(to_f32(x[k].v[e]), to_f32(wk.v[e]), to_f32(bk.v[e]), mean, rstd);
                    const float dyi = to_f32(dy[k].v[e]);
                    const float dyw = dyi * to_f32(wk.v[e]);
                    g += dyw;
                    gx += dyw * xhat;
                    dwv[j] += dyi * xhat;
                    dbv[j] += dyi;
                }
                dw_sum[slot] = dw4;
                db_sum[slot] = db4;
            }
        }
        const float mean_g = warp_sum(g) / static_cast<float>(c);
        const float mean_gx = warp_sum(gx) / static_cast<float>(c);
#pragma unroll
        for (int k = 0; k < kChunks; ++k) {
            const int p = k * kWarp + lane;
            if (p >= packs) continue;
            forget_derived(x[k]);
            forget_derived(dy[k]);
            const P wk = wp[p];
            const P bk = kFromOutput ? bp[p] : P{};
            P d = dxp[p];
#pragma unroll
            for (int e = 0; e < P::kSize; ++e) {
                const float xhat =
                    normalized<kFromOutput>(to_f32(x[k].v[e]), to_f32(wk.v[e]), to_f32(bk.v[e]), mean, rstd);
                const float dyw = to_f32(dy[k].v[e]) * to_f32(wk.v[e]);
                d.v[e] = from_f32<T>(to_f32(d.v[e]) + rstd * (dyw - mean_g - xhat * mean_gx));
            }
            dxp[p] = d;
        }
    }
    __syncthreads();
    auto* partial = reinterpret_cast<float4*>(partials + static_cast<std::int64_t>(blockIdx.x) * 2 * c);
    for (int s = static_cast<int>(threadIdx.x); s < slots; s += static_cast<int>(blockDim.x)) {
        const int p = s / (kWarp * kQuads) * kWarp + s % kWarp, h = s / kWarp % kQuads;
        if (p >= packs) continue;
        float4 dw4 = sums[s], db4 = sums[slots + s];
        for (int v = 1; v < kBackwardWarps; ++v) {
            const float4 a = sums[v * 2 * slots + s], b = sums[v * 2 * slots + slots + s];
            dw4 = make_float4(dw4.x + a.x, dw4.y + a.y, dw4.z + a.z, dw4.w + a.w);
            db4 = make_float4(db4.x + b.x, db4.y + b.y, db4.z + b.z, db4.w + b.w);
        }
        const int column4 = p * kQuads + h;  // (p · kSize + 4h) / 4
        partial[column4] = dw4;
        partial[c / 4 + column4] = db4;
    }
}

// The backward's general path, for rows the fast path does not take (not whole 16-byte packs,
// or too long for its registers and shared memory): one block per row at a time (rows
// blockIdx.x, + gridDim.x, ...), thread t owning columns t, t + 256, ... of every row, so its
// share of the block's dw and db accumulates in shared memory without atomics and in row order.
// The same arithmetic as the fast path with block-wide reductions, re-reading the row from
// global memory (L1/L2 hits) in each pass; the same partials [gridDim.x, 2c].
// Shared memory: 2c floats.
template <class T, bool kFromOutput>
__global__ void layernorm_backward_kernel(T* dx, float* partials, const T* dout, const T* in, FromOutput<T> src,
                                          const T* w, int rows, int c, float eps) {
    extern __shared__ float accumulated[];  // dw [c], then db [c]
    __shared__ float reduce[kWarp];
    const int t = static_cast<int>(threadIdx.x), step = static_cast<int>(blockDim.x);
    // Thread t accumulates dw[i] and db[i] for its columns i; db[i] = accumulated[c + i] may have
    // been zeroed (and is finally written) by another thread, hence the two barriers.
    for (int i = t; i < 2 * c; i += step) accumulated[i] = 0.0f;
    report_unrecoverable<kFromOutput>(w, c, src);
    __syncthreads();
    const auto bias = [&](int i) { return kFromOutput ? to_f32(src.b[i]) : 0.0f; };
    for (int row = static_cast<int>(blockIdx.x); row < rows; row += static_cast<int>(gridDim.x)) {
        const T* x = in + static_cast<std::int64_t>(row) * c;
        const T* dy = dout + static_cast<std::int64_t>(row) * c;
        T* dxr = dx + static_cast<std::int64_t>(row) * c;

        float mean = 0.0f, rstd = 0.0f;
        if constexpr (kFromOutput) {
            rstd = src.rstd[row];
        } else {
            float sum = 0.0f;
            for (int i = t; i < c; i += step) sum += to_f32(x[i]);
            mean = block_reduce<false>(sum, reduce) / static_cast<float>(c);
            float sq = 0.0f;
            for (int i = t; i < c; i += step) {
                const float d = to_f32(x[i]) - mean;
                sq += d * d;
            }
            rstd = 1.0f / sqrtf(block_reduce<false>(sq, reduce) / static_cast<float>(c) + eps);
        }

        float g = 0.0f, gx = 0.0f;
        for (int i = t; i < c; i += step) {
            const float xhat = normalized<kFromOutput>(to_f32(x[i]), to_f32(w[i]), bias(i), mean, rstd);
            const float dyi = to_f32(dy[i]);
            const float dyw = dyi * to_f32(w[i]);
            g += dyw;
            gx += dyw * xhat;
            accumulated[i] += dyi * xhat;
            accumulated[c + i] += dyi;
        }
        const float mean_g = block_reduce<false>(g, reduce) / static_cast<float>(c);
        const float mean_gx = block_reduce<false>(gx, reduce) / static_cast<float>(c);
        for (int i = t; i < c; i += step) {
            const float xhat = normalized<kFromOutput>(to_f32(x[i]), to_f32(w[i]), bias(i), mean, rstd);
            const float dyw = to_f32(dy[i]) * to_f32(w[i]);
            dxr[i] = from_f32<T>(to_f32(dxr[i]) + rstd * (dyw - mean_g - xhat * mean_gx));
        }
    }
    __syncthreads();
    float* partial = partials + static_cast<std::int64_t>(blockIdx.x) * 2 * c;
    for (int i = t; i < 2 * c; i += step) partial[i] = accumulated[i];
}

// dw[j] += Σ_b partials[b, j] and db[j] += Σ_b partials[b, c + j], b in block order, for the 2c
// columns in one launch: block (32, kWeightGradRows) over 32 consecutive columns, thread (x, y)
// summing partial rows y, y + kWeightGradRows, ... of its column, then thread (x, 0) adding those
// sums in order of y. column_sum_kernel's scheme with more threads per column (the partials are
// hundreds of rows, each thread reading a few) and two outputs, so that dw and db take one
// launch, not two.
constexpr int kWeightGradRows = 16;

template <class T>
__global__ void layernorm_weight_grads_kernel(T* dw, T* db, const float* partials, int blocks, int c) {
    __shared__ float sums[kWeightGradRows][kWarp + 1];
    const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
    const int j = static_cast<int>(blockIdx.x) * kWarp + tx;
    float sum = 0.0f;
    if (j < 2 * c) {
#pragma unroll 4
        for (int b = ty; b < blocks; b += kWeightGradRows) sum += partials[static_cast<std::int64_t>(b) * 2 * c + j];
    }
    sums[ty][tx] = sum;
    __syncthreads();
    if (ty != 0 || j >= 2 * c) return;
    for (int k = 1; k < kWeightGradRows; ++k) sum += sums[k][tx];
    T* out = j < c ? dw + j : db + (j - c);
    *out = from_f32<T>(to_f32(*out) + sum);
}

// x + dropout(y) at element i of a row, rounded to T where the separate kernels store: the
// dropped value after the dropout pass, the sum after the residual add. __fmul_rn / __fadd_rn
// round each step separately, as those kernels do, never contracted into one fused multiply-add
// (which would round once and differ in the last bit). The mask's 64-bit index arithmetic only
// when dropout is on: it costs more than the add.
template <class T>
__device__ T residual_sum(const T* xr, const T* yr, const Dropout& d, std::uint32_t site, int row, int c, int i) {
    float dropped = to_f32(yr[i]);
    if (d.active()) {
        const float f = d.row_factor(site, static_cast<std::uint64_t>(row), static_cast<std::uint64_t>(c),
                                     static_cast<std::uint64_t>(i));
        dropped = to_f32(from_f32<T>(__fmul_rn(dropped, f)));
    }
    return from_f32<T>(__fadd_rn(to_f32(xr[i]), dropped));
}

// The `residual_ln` fusion, one warp per row: x += dropout(y) on the residual stream, then
// out = LayerNorm(x) · w + b, in one kernel instead of three (dropout, residual add, LayerNorm)
// and without the round trips of x and y through memory between them. The sum is recomputed in
// each of the three passes rather than stored in the first and read back: a row the kernel has
// written is read from L2 (a store evicts it from L1), one it has only read from L1, and the
// recomputation is one add. x is written once, in the last pass. Same reduction order and
// rounding as residual_add_kernel followed by layernorm_kernel: the same result bit for bit.
template <class T>
__global__ void residual_layernorm_kernel(T* out, T* x, const T* y, Dropout d, std::uint32_t site, const T* w,
                                          const T* b, int rows, int c, float eps) {
    const int warps_per_block = static_cast<int>(blockDim.x) / kWarp;
    const int row = static_cast<int>(blockIdx.x) * warps_per_block + static_cast<int>(threadIdx.x) / kWarp;
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    if (row >= rows) return;  // the whole warp leaves together, so the shuffles stay full-mask
    T* xr = x + static_cast<std::int64_t>(row) * c;
    const T* yr = y + static_cast<std::int64_t>(row) * c;
    T* o = out + static_cast<std::int64_t>(row) * c;

    float sum = 0.0f;
    for (int i = lane; i < c; i += kWarp) sum += to_f32(residual_sum(xr, yr, d, site, row, c, i));
    const float mean = warp_sum(sum) / static_cast<float>(c);

    float sq = 0.0f;
    for (int i = lane; i < c; i += kWarp) {
        const float dv = to_f32(residual_sum(xr, yr, d, site, row, c, i)) - mean;
        sq += dv * dv;
    }
    const float var = warp_sum(sq) / static_cast<float>(c);
    const float rstd = 1.0f / sqrtf(var + eps);

    // Each lane reads element i before it writes it, and no other lane touches i: in place is safe.
    for (int i = lane; i < c; i += kWarp) {
        const T v = residual_sum(xr, yr, d, site, row, c, i);
        xr[i] = v;
        o[i] = from_f32<T>((to_f32(v) - mean) * rstd * to_f32(w[i]) + to_f32(b[i]));
    }
}

}  // namespace

template <class T>
void launch_layernorm(T* out, const T* in, const T* w, const T* b, int rows, int c, float eps, cudaStream_t stream) {
    if (rows == 0) return;
    const int warps_per_block = kBlock / kWarp;
    const int blocks = (rows + warps_per_block - 1) / warps_per_block;
    layernorm_kernel<T><<<blocks, kBlock, 0, stream>>>(out, nullptr, in, w, b, rows, c, eps);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_layernorm_keeping_rstd(T* out, float* rstd, const T* in, const T* w, const T* b, int rows, int c, float eps,
                                   cudaStream_t stream) {
    if (rows == 0) return;
    const int warps_per_block = kBlock / kWarp;
    const int blocks = (rows + warps_per_block - 1) / warps_per_block;
    layernorm_kernel<T><<<blocks, kBlock, 0, stream>>>(out, rstd, in, w, b, rows, c, eps);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch_residual_layernorm(T* out, T* x, const T* y, const Dropout& d, std::uint32_t site, const T* w, const T* b,
                               int rows, int c, float eps, cudaStream_t stream) {
    if (rows == 0) return;
    const int warps_per_block = kBlock / kWarp;
    const int blocks = (rows + warps_per_block - 1) / warps_per_block;
    residual_layernorm_kernel<T><<<blocks, kBlock, 0, stream>>>(out, x, y, d, site, w, b, rows, c, eps);
    CUDA_CHECK_LAUNCH();
}

namespace {

bool on_16_bytes(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Runs layernorm_backward_warp_kernel<T, kChunks, kFromOutput> over at most `max_blocks` blocks,
// as many as fit on the device's `sms` SMs at once (the grid is persistent); returns the blocks,
// one partial row each.
template <class T, int kChunks, bool kFromOutput>
int launch_backward_warps(T* dx, float* partials, const T* dout, const T* in, const FromOutput<T>& from, const T* w,
                          int rows, int c, float eps, std::size_t shared, int sms, int max_blocks, cudaStream_t stream) {
    const auto kernel = layernorm_backward_warp_kernel<T, kChunks, kFromOutput>;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
    int per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kBlock, shared));
    const int blocks = std::max(1, std::min(max_blocks, per_sm * sms));
    kernel<<<blocks, kBlock, shared, stream>>>(dx, partials, dout, in, from, w, rows, c, eps);
    CUDA_CHECK_LAUNCH();
    return blocks;
}

// Both backwards: x̂ from `in` as kFromOutput says (FromOutput).
template <class T, bool kFromOutput>
void launch_backward(T* dx, T* dw, T* db, const T* dout, const T* in, const FromOutput<T>& from, const T* w, int rows,
                     int c, float eps, float* scratch, cudaStream_t stream) {
    if (rows == 0) return;
    // At most min(rows, kLayerNormBackwardBlocks) partial rows: layernorm_backward_scratch_floats.
    const int max_blocks = std::min(rows, kLayerNormBackwardBlocks);
    const int packs = c / Pack<T>::kSize, chunks = (packs + kWarp - 1) / kWarp;
    const std::size_t warp_path_shared = backward_shared_bytes<T>(c);
    int device = 0, sms = 0, shared_limit = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&shared_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const bool whole_packs = c % Pack<T>::kSize == 0 && on_16_bytes(dx) && on_16_bytes(dout) && on_16_bytes(in) &&
                             on_16_bytes(w) && on_16_bytes(from.b) && on_16_bytes(scratch);
    int blocks = 0;
    if (whole_packs && chunks <= kMaxBackwardChunks && warp_path_shared <= static_cast<std::size_t>(shared_limit)) {
        const int warp_blocks = std::min(max_blocks, (rows + kBackwardWarps - 1) / kBackwardWarps);
        const auto run = [&](auto launch) {
            return launch(dx, scratch, dout, in, from, w, rows, c, eps, warp_path_shared, sms, warp_blocks, stream);
        };
        if (chunks <= 1) blocks = run(launch_backward_warps<T, 1, kFromOutput>);
        else if (chunks <= 2) blocks = run(launch_backward_warps<T, 2, kFromOutput>);
        else if (chunks <= 4) blocks = run(launch_backward_warps<T, 4, kFromOutput>);
        else if (chunks <= 8) blocks = run(launch_backward_warps<T, 8, kFromOutput>);
        else blocks = run(launch_backward_warps<T, kMaxBackwardChunks, kFromOutput>);
    } else {
        blocks = max_blocks;
        const std::size_t shared = 2 * static_cast<std::size_t>(c) * sizeof(float);
        // Above 48 KiB (c > 6144) a kernel must opt in to more dynamic shared memory.
        const auto kernel = layernorm_backward_kernel<T, kFromOutput>;
        if (shared > 48 * 1024) {
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared)));
        }
        kernel<<<blocks, kBlock, shared, stream>>>(dx, scratch, dout, in, from, w, rows, c, eps);
        CUDA_CHECK_LAUNCH();
    }
    const unsigned columns = static_cast<unsigned>((2 * c + kWarp - 1) / kWarp);
    layernorm_weight_grads_kernel<T><<<columns, dim3(kWarp, kWeightGradRows), 0, stream>>>(dw, db, scratch, blocks, c);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class T>
void launch_layernorm_backward(T* dx, T* dw, T* db, const T* dout, const T* in, const T* w, int rows, int c, float eps,
                               float* scratch, cudaStream_t stream) {
    launch_backward<T, false>(dx, dw, db, dout, in, FromOutput<T>{}, w, rows, c, eps, scratch, stream);
}

template <class T>
void launch_layernorm_backward_from_output(T* dx, T* dw, T* db, const T* dout, const T* out, const T* w, const T* b,
                                           const float* rstd, int rows, int c, float* scratch, int* unrecoverable,
                                           int tag, cudaStream_t stream) {
    launch_backward<T, true>(dx, dw, db, dout, out,
                             FromOutput<T>{.b = b, .rstd = rstd, .unrecoverable = unrecoverable, .tag = tag}, w, rows, c,
                             0.0f, scratch, stream);
}

#define SWEETSPOT_INSTANTIATE(T) \
    template void launch_layernorm<T>(T*, const T*, const T*, const T*, int, int, float, cudaStream_t); \
    template void launch_layernorm_keeping_rstd<T>(T*, float*, const T*, const T*, const T*, int, int, float,   \
                                                   cudaStream_t);                                              \
    template void launch_layernorm_backward_from_output<T>(T*, T*, T*, const T*, const T*, const T*, const T*,  \
                                                           const float*, int, int, float*, int*, int, cudaStream_t); \
    template void launch_layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, float, float*, \
                                               cudaStream_t);                                              \
    template void launch_residual_layernorm<T>(T*, T*, const T*, const Dropout&, std::uint32_t, const T*, const T*, int, int, float, cudaStream_t);  

SWEETSPOT_INSTANTIATE(float)
SWEETSPOT_INSTANTIATE(__half)
SWEETSPOT_INSTANTIATE(__nv_bfloat16)

#undef SWEETSPOT_INSTANTIATE

}  // namespace sweetspot::gpu
