#pragma once
// A cell's memory, predicted from its parameters alone before anything runs (no GPU needed): the
// weights as its backend will place them, the GPU forward's activations and attention scores for
// its variant, and the GEMM workspace. Each term is computed by the code that allocates it (the
// backend registry's footprint, activation_layout, gemm_device_bytes), so the prediction
// follows any change there.
//
// What a GPU process holds beyond its allocations (the CUDA context and the libraries; the page
// tables mapping host memory; the driver's own memory for managed memory) is measured per GPU
// model and driver from a results database (measured_fixed_costs) and added by predicted_peak.
// On the host, the weights' memory (page-locked, managed pages kept there, the host backend's own),
// the logits the process holds and the check's host reference forward are computed the same way;
// what the process holds besides (the libraries, the CUDA runtime, the allocator) is measured per
// GPU model and driver and per backend, and added by predicted_host_peak.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/matrix/cell.hpp"
#include "harness/store/sqlite.hpp"

namespace sweetspot {

struct MemoryEstimate {
    // Device memory, bytes.
    std::int64_t weights = 0;      // what the backend holds on the GPU for the weights
    std::int64_t activations = 0;  // the forward's activation allocation without the scores
    std::int64_t scores = 0;       // the [batch, heads, seq, seq] scores; 0 for flash_attention
    std::int64_t workspace = 0;    // the GEMM workspace
    // A training step's state where the backend keeps it on the device (TrainingState): the
    // gradients, AdamW's moments and the master weights.
    std::int64_t training_state = 0;
    // A training cell's prefix step (step_check.hpp): its buffers and workspace at batch 1 on the
    // prefix, and its scratch unit beside the backend's (check_step_scratch_bytes). It is freed
    // before the cell's own step allocates, so the peak holds the larger of the two.
    std::int64_t check_step = 0;
    // activations = "managed": the activation allocation is managed memory, counted above at its
    // full size (the forward touches all of it, so all of it migrates to the GPU).
    bool managed_activations = false;
    // Managed weight bytes beyond `weights` that the GPU still holds at the cell's peak. On an
    // H100 (driver 580), NVML's used memory showed every managed page a cell had migrated to the
    // GPU staying there until the process ended, whatever the budget (docs/benchmarks-history.md): the
    // driver keeps the pages it evicted, ready to evict for other allocations. So a UVM cell's
    // peak holds all of its weights, and these bytes are not part of what must fit.
    std::int64_t retained_managed = 0;
    // Host memory, bytes.
    std::int64_t pinned_host = 0;  // page-locked weights (explicit-copy)
    // The page-locked staging a training step's state crosses the link through, where its
    // optimizer runs on the host, and explicit-copy's page-locked gradients of the units it
    // streams (TrainingState's pinned bytes).
    std::int64_t pinned_staging = 0;
    std::int64_t managed = 0;      // managed allocations (UVM weights; managed activations)
    // The weights' host memory at the peak (WeightFootprint::host_bytes).
    std::int64_t host_weights = 0;
    // A training step's state where the backend keeps it in the host's pageable memory
    // (TrainingState): the host backend's gradients and moments, or the master weights and
    // moments of an optimizer on the host.
    std::int64_t host_training_state = 0;
    // Host cells: the CPU forward's activations and the logits, or the training step's kept
    // activations and scratch (CpuBackprop). GPU cells: the logits rows the
    // check fetches from the device and the reference logits of those rows.
    std::int64_t host_buffers = 0;
    // GPU cells: the check's host reference forward, where it runs (the first cell of a workload
    // whose reference the database keeps; every cell of a small model): its largest unit in fp32,
    // made one at a time, and its activations. A training cell's prefix check: every weight in
    // fp32 and one unit's float64 gradient (check_reference_host_bytes).
    std::int64_t host_reference = 0;
    std::int64_t host_total(bool reference_runs) const {
        return host_weights + host_training_state + pinned_staging + host_buffers + (reference_runs ? host_reference : 0);
    }
    std::int64_t pinned_total() const { return pinned_host + pinned_staging; }

    // What sweetspot allocates on the device: the harness's own accounting of a cell
    // (device_weight_bytes + activation_bytes) measures the same.
    std::int64_t device_total() const {
        return weights + training_state + std::max(activations + scores + workspace, check_step);
    }
};

// What a GPU process's peak holds beyond a cell's allocations, measured, not guessed, on one GPU
// model and driver from a results database's ok cells: the peak is NVML's (gpu_peak_bytes, the used
// memory less what was in use before the cell), or device_used_bytes where there is none.
struct FixedCost {
    std::string gpu, driver;
    // The CUDA context and the libraries' code and pools: the peak less the allocations, over the
    // `device` cells (all of whose memory is their own; explicit-copy cells where there is none).
    // The estimate adds the largest.
    std::int64_t largest = 0, smallest = 0;
    int cells = 0;
    // Device memory per byte of page-locked host memory, for the GPU's page tables that map it:
    // the explicit-copy cells' peak beyond their allocations and `largest`, against the bytes they
    // pinned (least squares through zero; 0 without such cells).
    double per_pinned_byte = 0;
    // What the driver holds for managed weights beyond the pages themselves, per dtype: the
    // largest over the uvm and uvm-prefetch cells of that dtype of their peak less `largest`,
    // their activations and all their weight bytes.
    std::map<DType, std::int64_t> managed_overhead;

    // What a cell's process holds on the host beyond the estimate's host terms (the libraries'
    // code and data, the CUDA runtime and driver, the allocator's slack): the largest over the
    // cells of one key of their peak resident memory less the host_total they stored
    // (predicted_host_alloc_bytes). The key is the backend, whether the cell computed its check's
    // reference (whose float64 work leaves slack of its own: 0.6 GiB beside a GPT-2 1.5B training
    // cell's 0.5 GiB) and the cell's kernels (kernel_set: mode, dtype and variant), whose code the
    // libraries load into host memory on first use (16 MiB more for GPT-2 1.5B bf16 training
    // with the GELU in cuBLASLt's epilogue than in a kernel of its own).
    struct HostProcessKey {
        BackendId backend;
        bool reference;
        std::string kernels;
        auto operator<=>(const HostProcessKey&) const = default;
    };
    std::map<HostProcessKey, std::int64_t> host_process;

    // That dtype's managed overhead; when none was measured for it, the largest measured for
    // another dtype scaled by the element sizes; none without UVM cells (it is measured, not
    // guessed).
    std::optional<std::int64_t> managed_overhead_for(DType dtype) const;
    // That key's host process memory; where no cell measured it, the largest measured for the
    // backend with the same reference case, else for the backend, else for any; none without
    // cells that say whether their reference ran.
    std::optional<std::int64_t> host_process_for(const HostProcessKey& key) const;
    // The kernel set of a cell's key: "train bf16 flash_attention+mlp_epilogue".
    static std::string kernel_set(Mode mode, DType dtype, const Variant& variant);
};

// One entry per GPU and driver with such cells, from a results database (a run's own connection
// serves: the query only reads).
std::vector<FixedCost> measured_fixed_costs(Database& db);

// The device memory a cell must have: its allocations, the CUDA context and libraries, and the
// page tables of its page-locked memory. What predicted_oom and fit compare with a capacity.
std::int64_t predicted_need(const MemoryEstimate& e, const FixedCost& fixed);
// The peak device memory a GPU cell is predicted to reach: its need, the managed pages the driver
// keeps (retained_managed) and, for managed weights, the driver's overhead for them; none for
// managed weights before a UVM cell has measured that overhead.
std::optional<std::int64_t> predicted_peak(const CellParams& cell, const MemoryEstimate& e, const FixedCost& fixed);
// The peak host memory a GPU cell's process is predicted to reach: host_total (with the check's
// reference forward where `reference_runs`) and the process's own memory measured for its
// backend; none before any cell measured that.
std::optional<std::int64_t> predicted_host_peak(const CellParams& cell, const MemoryEstimate& e, const FixedCost& fixed,
                                                bool reference_runs);

// Why `cell` is predicted not to fit a GPU of `capacity` bytes (the numbers, and --force), or
// empty when its predicted need fits.
std::string predicted_oom(const CellParams& cell, std::int64_t capacity, const FixedCost& fixed);

// Why `cell` is predicted not to fit the host's `available` memory: its page-locked memory
// (explicit-copy's weights, an optimizer's staging), managed memory (the UVM backends' weights,
// which start on the host) and a training state kept on the host, with the numbers and --force;
// empty when they fit. The pageable memory a cell uses besides (the check's host reference, a
// unit being converted) is small against these and not predicted.
std::string predicted_host_oom(const CellParams& cell, std::int64_t available);

// What fits a GPU of `capacity` bytes for a cell taken as a template: the largest batch at its seq
// and the largest seq at its batch whose predicted need fits (empty when not even 1 does), and,
// for a backend that runs under a budget, the smallest budget (bytes) at which it can still run.
struct Fit {
    std::optional<int> batch, seq;
    std::optional<std::int64_t> smallest_budget;
};
Fit fit(const CellParams& cell, std::int64_t capacity, const FixedCost& fixed);

// The estimate for a cell that cell_impossible_reason accepts (throws std::invalid_argument
// with the backend's reason otherwise). A host-backend cell uses no device memory.
MemoryEstimate estimate_memory(const CellParams& cell);
// The same with its forward over `shape` in place of the batch the cell draws (a training step's
// buffers follow the cell's batch × seq: its batch is rectangular).
MemoryEstimate estimate_memory(const CellParams& cell, const BatchShape& shape);

}  // namespace sweetspot
