#pragma once
// Where a model's weights live and how they reach the compute. One interface; each backend
// (device, explicit-copy, uvm, uvm-prefetch, host) implements it in its own file.
#include <cstdint>
#include <functional>
#include <span>
#include <type_traits>
#include <utility>

#include "base/named_enum.hpp"
#include "kernels/model/dtype.hpp"
#include "kernels/model/layer_source.hpp"
#include "kernels/model/unit_schedule.hpp"
#include "kernels/model/weight_layout.hpp"

struct CUstream_st;  // cudaStream_t, without making this header depend on CUDA

namespace sweetspot {

// The backends; backend_registry.hpp says what each can do and makes them (make_backend).
enum class BackendId { device, explicit_copy, uvm, uvm_prefetch, host };
template <>
struct EnumNames<BackendId> {
    static constexpr std::array<EnumName<BackendId>, 5> list = {{{BackendId::device, "device"},
                                                                 {BackendId::explicit_copy, "explicit-copy"},
                                                                 {BackendId::uvm, "uvm"},
                                                                 {BackendId::uvm_prefetch, "uvm-prefetch"},
                                                                 {BackendId::host, "host"}}};
};

// Which units a budget-limited backend keeps on the device for the whole cell.
enum class ResidentPolicy { interleaved, first, last };
template <>
struct EnumNames<ResidentPolicy> {
    static constexpr std::array<EnumName<ResidentPolicy>, 3> list = {
        {{ResidentPolicy::interleaved, "interleaved"}, {ResidentPolicy::first, "first"}, {ResidentPolicy::last, "last"}}};
};

// How the UVM backends evict a unit: migrate it back to the host, or drop the GPU's read-only
// duplicate of a cudaMemAdviseSetReadMostly range, which moves no bytes and so costs a small
// fraction of the migration (docs/benchmarks-history.md has both times).
enum class UvmEvict { migrate, read_mostly };
template <>
struct EnumNames<UvmEvict> {
    static constexpr std::array<EnumName<UvmEvict>, 2> list = {
        {{UvmEvict::migrate, "migrate"}, {UvmEvict::read_mostly, "read-mostly"}}};
};

// Where a training step's state lives: the gradients, and the optimizer's (fp32 master weights,
// AdamW's two moments), which the `optimizer` axis places: beside the weights on the GPU, or in
// host memory, updated on the CPU cores (ZeRO-Offload's placement).
enum class StateHome { device, host };
template <>
struct EnumNames<StateHome> {
    static constexpr std::array<EnumName<StateHome>, 2> list = {{{StateHome::device, "device"}, {StateHome::host, "host"}}};
};

struct BackendConfig {
    BackendId backend = BackendId::host;
    DType dtype = DType::fp32;
    int streams = 1;                 // copy / prefetch streams (0: use the compute stream)
    int prefetch_depth = 0;          // 0: off, -1: just in time (as cuda-uvm-gpt2), n: look-ahead in units
    std::int64_t budget_bytes = 0;   // device bytes the weights may occupy (slots included)
    ResidentPolicy resident = ResidentPolicy::interleaved;
    UvmEvict evict = UvmEvict::migrate;
    bool allow_oversubscription = false;
    StateHome optimizer = StateHome::device;  // where a placement for training keeps the optimizer's state
    CUstream_st* compute_stream = nullptr;  // where the forward's kernels run (GPU backends)
};

// What a backend did with the weights, stored with every cell.
struct PlacementStats {
    std::int64_t resident_bytes = 0;        // kept on the device for the whole cell
    std::int64_t streamed_bytes = 0;        // must cross the link in every forward
    std::int64_t device_weight_bytes = 0;   // device memory the backend holds for weights (resident + slots)
    std::int64_t pinned_host_bytes = 0;     // page-locked host memory it holds for them (explicit-copy)
    std::int64_t training_state_bytes = 0;  // device memory it holds for gradients and optimizer state
    int resident_units = 0, streamed_units = 0, slots = 0;
};

// Where the weights come from, unit by unit: always as fp32 on the host. Weights that are made
// rather than read (the synthetic ones) can also be written by kernels, in any dtype, straight
// into the memory they stay in, which every GPU backend then uses instead: nothing made on the
// host's cores, nothing staged.
class UnitFiller {
public:
    using HostFill = std::function<void(int unit, std::span<float> dst)>;
    using DeviceFill = std::function<void(int unit, DType dtype, void* dst, CUstream_st* stream)>;

    template <class F>
        requires std::is_invocable_v<const F&, int, std::span<float>>
    UnitFiller(F host) : host_(std::move(host)) {}  // NOLINT: a plain fill converts implicitly

    // The same filler that can also fill memory kernels write (device, managed, or page-locked
    // host memory through its device pointer) through `device`.
    UnitFiller with_device_fill(DeviceFill device) const {
        UnitFiller f = *this;
        f.device_ = std::move(device);
        return f;
    }

    // Writes unit `unit`'s fp32 weights into `dst` (unit.numel elements).
    void operator()(int unit, std::span<float> dst) const { host_(unit, dst); }
    bool fills_device() const { return static_cast<bool>(device_); }
    // Enqueues on `stream` the writing of unit `unit`, in `dtype`, by kernels at `dst`
    // (the same bits as operator() followed by convert_from_f32). Only where fills_device().
    void fill_device(int unit, DType dtype, void* dst, CUstream_st* stream) const { device_(unit, dtype, dst, stream); }

private:
    HostFill host_;
    DeviceFill device_;
};

class Backend : public LayerSource {
public:
    using UnitFiller = sweetspot::UnitFiller;

    // Allocates storage for every unit and fills it once through `fill`, converting to the
    // configured dtype, for steps that access the units as `schedule` says (every step the same):
    // a backend streams and prefetches in its order, and holds gradients and optimizer state
    // where it updates. Throws std::invalid_argument when the budget cannot hold the streaming
    // slots the configuration needs, std::logic_error for a schedule the backend cannot follow
    // (the registry's trains_reason says which).
    virtual void place(const WeightLayout& layout, const UnitFiller& fill, const UnitSchedule& schedule) = 0;
    // Puts the weights back in the cell's starting state before an iteration (may synchronize;
    // it is outside the timed region).
    virtual void reset_residency() = 0;
    virtual PlacementStats placement() const = 0;
    // What the backend itself moved across the host link since reset_residency(), bytes each way
    // (explicit-copy's streamed weights in, uvm-prefetch's prefetches, their streamed units'
    // gradients out); complete once the step's update returned. The compute's own copies are its
    // to count.
    virtual LinkBytes link_bytes_since_reset() const { return {}; }
    // Where unit `unit`'s weights are kept between steps, for a copy (cudaMemcpyDefault) after the
    // step's work is done, outside the schedule: device memory, or page-locked host memory for a
    // unit explicit-copy streams. Not for the compute, which acquires.
    virtual const void* stored_weights(int unit) { return acquire(unit); }
};

}  // namespace sweetspot
