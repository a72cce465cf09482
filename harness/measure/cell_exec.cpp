#include "harness/measure/cell_exec.hpp"

#include <filesystem>

#include <sys/resource.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "backends/backend.hpp"
#include "backends/backend_registry.hpp"
#include "backends/residency_plan.hpp"
#include "base/number_text.hpp"
#include "harness/measure/host_cell.hpp"
#include "harness/measure/logits_check.hpp"
#include "harness/measure/measurement.hpp"
#include "harness/store/store.hpp"
#include "harness/system/exit_codes.hpp"
#ifdef SWEETSPOT_HAVE_CUDA
#include "harness/measure/gpu_cell.hpp"
#endif
#include "harness/system/system_info.hpp"
#include "kernels/compute/family_compute.hpp"
#include "kernels/compute/flash_attention_limits.hpp"
#include "kernels/compute/gemm_limits.hpp"
#include "kernels/compute/managed_memory.hpp"
#include "kernels/model/model_family.hpp"

namespace sweetspot {
namespace {

[[noreturn]] void inject_fault(DebugFault fault) {
    std::fprintf(stderr, "debug_fault = \"%s\": failing on purpose\n", std::string(enum_name(fault)).c_str());
    std::fflush(stderr);
    // A deliberate crash should not leave a core file behind.
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    switch (fault) {
        case DebugFault::segfault: std::raise(SIGSEGV); break;
        case DebugFault::abort: std::abort();
        case DebugFault::hang:
            for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
        case DebugFault::none:
        case DebugFault::exit: break;
    }
    std::_Exit(3);
}

void write_outcome(const std::string& scratch_db, const CellParams& c, const CellOutcome& o) {
    auto store = Store::open(scratch_db);
    RunInfo info;
    info.started_at = o.get<"started_at">().value_or(utc_timestamp());
    const auto run = store.begin_run(info);
    record_outcome(store, run, 0, c, o);
}

// Why a training cell cannot run: a backend that does not train, or settings the GPU training
// step has no kernels for; empty for an inference cell.
std::string training_impossible_reason(const CellParams& c) {
    if (c.mode != Mode::train) return {};
    const BackendTraits& backend = backend_traits(c.backend);
    if (!backend.training)
        return "the " + std::string(enum_name(c.backend)) + " backend does not train: " + std::string(backend.no_training_reason);
    if (!c.variant.within(kTrainingFusions))
        return "training runs the fusions " + kTrainingFusions.fusions_text() + " and none other yet; variant '" +
               c.variant.text() + "' has " + c.variant.fusions_text();
    if (c.variant.has(Fusion::mlp_epilogue) && !c.variant.has(Fusion::inplace_gelu) &&
        !gemm_aux_width_fits(4 * c.model.n_embd))
        return "training's mlp_epilogue keeps the GELU's input in a cuBLASLt buffer whose width (4 × n_embd = " +
               std::to_string(4 * c.model.n_embd) + " for model '" + c.model.name + "') must be a multiple of 8";
    if (c.activations != Activations::device) return "training keeps its activations in device memory (activations = \"device\")";
    if (c.launch != Launch::kernels) return "training launches its kernels one by one (launch = \"kernels\")";
    return {};
}

// Why the cell's recompute setting cannot be honoured: only the GPU training step has a backward
// that computes activations again; the host's (CpuTrainStep) keeps every one.
std::string recompute_impossible_reason(const CellParams& c) {
    if (c.recompute == CellParams{}.recompute) return {};
    const std::string setting = "recompute = \"" + std::string(enum_name(c.recompute)) + "\"";
    if (c.mode != Mode::train)
        return setting + " is a setting of training steps (mode = \"train\"): an inference forward keeps no "
                         "activations for a backward";
    if (!backend_traits(c.backend).needs_gpu)
        return "the " + std::string(enum_name(c.backend)) + " backend's training step keeps every activation; " +
               setting + " needs a GPU backend";
    return {};
}

// Why an inference cell cannot take its variant's training-only fusions: they change what a
// training step keeps for its backward, and an inference forward keeps nothing.
std::string training_only_fusion_reason(const CellParams& c) {
    if (c.mode == Mode::train) return {};
    for (const auto& f : EnumNames<Fusion>::list) {
        if (c.variant.has(f.value) && kTrainingOnlyFusions.has(f.value))
            return "the " + std::string(f.name) + " fusion of variant '" + c.variant.text() +
                   "' changes what a training step (mode = \"train\") keeps for its backward: an inference forward "
                   "keeps no activations for a backward";
    }
    return {};
}

// Why split_tf32 cannot apply: it is a form of the GPU's fp32 GEMMs, and tf32 is another.
std::string split_tf32_impossible_reason(const CellParams& c) {
    if (!c.split_tf32) return {};
    if (c.tf32) return "tf32 and split_tf32 are two forms of fp32 GEMMs; a cell takes one";
    if (c.dtype != DType::fp32)
        return "split_tf32 is a form of fp32 GEMMs; dtype " + std::string(enum_name(c.dtype)) +
               " computes on its own tensor cores";
    if (!backend_traits(c.backend).needs_gpu)
        return "split_tf32 is a form of the GPU's fp32 GEMMs; the " + std::string(enum_name(c.backend)) +
               " backend computes on the CPU";
    return {};
}

// Why the cell's optimizer placement cannot be honoured: an inference cell has no optimizer, and a
// backend that takes the `optimizer` axis keeps the optimizer's state only where its TrainingState
// says it can (the default, `device`, included: explicit-copy trains with `host` only). A backend
// without the axis (host) keeps its state where it does whatever the cell says.
std::string optimizer_impossible_reason(const CellParams& c) {
    const bool by_default = c.optimizer == CellParams{}.optimizer;
    const std::string setting =
        "optimizer = \"" + std::string(enum_name(c.optimizer)) + "\"" + (by_default ? ", the default" : "");
    if (c.mode != Mode::train) {
        if (by_default) return {};
        return setting + " is a setting of training steps (mode = \"train\"): an inference forward has no optimizer";
    }
    const BackendTraits& backend = backend_traits(c.backend);
    if (!backend.training || !backend.uses("optimizer") || backend.training->keeps_optimizer_on(c.optimizer)) return {};
    std::vector<std::string> able, homes;
    for (const BackendTraits& b : backend_registry())
        if (b.training && b.training->keeps_optimizer_on(c.optimizer)) able.emplace_back(enum_name(b.id));
    for (const StateHome home : backend.training->optimizer_homes)
        homes.push_back("optimizer = \"" + std::string(enum_name(home)) + "\"");
    return "the " + std::string(enum_name(c.backend)) + " backend cannot keep the optimizer's state in " +
           std::string(enum_name(c.optimizer)) + " memory (" + setting + "); it trains with " + comma_list(homes) +
           ", and " + std::string(enum_name(c.optimizer)) + " is honoured by: " + comma_list(able);
}

// Why max_grad_norm cannot apply: it is a setting of a training step's update.
std::string max_grad_norm_impossible_reason(const CellParams& c) {
    if (c.mode == Mode::train || c.max_grad_norm == CellParams{}.max_grad_norm) return {};
    return "max_grad_norm = " + format_number(c.max_grad_norm) +
           " is a setting of training steps (mode = \"train\"): an inference forward has no gradients to clip";
}

// Why the model's family cannot run the cell yet: what its compute declares it lacks
// (family_compute.hpp), the fusions its GPU forward or training step does not take, and dropout
// where its blocks have none.
std::string family_impossible_reason(const CellParams& c) {
    const FamilyCompute& compute = compute_of(c.model.family);
    const std::string family = "model '" + c.model.name + "' (" + std::string(family_of(c.model).title) + ")";
    if (backend_traits(c.backend).needs_gpu) {
        if (!compute.no_gpu_forward.empty()) return family + ": " + std::string(compute.no_gpu_forward);
        if (c.mode == Mode::train && !compute.no_gpu_training.empty())
            return family + ": " + std::string(compute.no_gpu_training);
        if (c.mode == Mode::train && !c.variant.within(compute.gpu_training_fusions))
            return family + " trains on the GPU within the fusions " + compute.gpu_training_fusions.fusions_text() +
                   "; variant '" + c.variant.text() + "' has " + c.variant.fusions_text();
        if (!c.variant.within(compute.gpu_fusions) || !compute.gpu_required.within(c.variant)) {
            const std::string required = compute.gpu_required.is_baseline()
                                             ? std::string()
                                             : "with the fusions " + compute.gpu_required.fusions_text() + " and ";
            return family + " runs on the GPU " + required + "within the fusions " + compute.gpu_fusions.fusions_text() +
                   "; variant '" + c.variant.text() + "' has " + c.variant.fusions_text();
        }
    }
    if (c.dropout > 0 && !compute.dropout) return family + " has no dropout; dropout = " + format_number(c.dropout) + " needs 0";
    return {};
}

// Why a GPU backend cannot run the cell's ragged batch with its variant (gpu_forward_runs_ragged:
// the GPU forward and training step alike).
std::string gpu_ragged_batch_reason(const CellParams& c) {
    if (c.lengths.is_fixed() || !backend_traits(c.backend).needs_gpu || gpu_forward_runs_ragged(c.variant)) return {};
    const std::string what = c.mode == Mode::train ? "the GPU training step" : "the GPU forward";
    return "lengths = \"" + c.lengths.text() + "\" draws a ragged batch, which " + what + " runs with the "
           "flash_attention fusion only (its attention takes each sequence's own rows): variant '" + c.variant.text() +
           "' has " + c.variant.fusions_text();
}

// Why the cell's drawn lengths (a ragged batch) cannot run as asked: dropout's masks are made for
// rectangular batches, and the GPU's attention as gpu_ragged_batch_reason says.
std::string lengths_impossible_reason(const CellParams& c) {
    if (c.lengths.is_fixed()) return {};
    const std::string setting = "lengths = \"" + c.lengths.text() + "\"";
    if (const std::string why = gpu_ragged_batch_reason(c); !why.empty()) return why;
    if (c.dropout > 0)
        return setting + " draws a ragged batch, and dropout's masks are numbered by the positions of a rectangular "
                         "one: dropout = " + format_number(c.dropout) + " needs lengths = \"fixed\"";
    return {};
}

}  // namespace

bool uses_gpu(const CellParams& c) { return backend_traits(c.backend).needs_gpu; }

BackendConfig backend_config(const CellParams& c) {
    BackendConfig b;
    b.backend = c.backend;
    b.dtype = c.dtype;
    b.streams = c.streams;
    b.prefetch_depth = c.prefetch.kind == Prefetch::Kind::off   ? 0
                       : c.prefetch.kind == Prefetch::Kind::jit ? -1
                                                                : c.prefetch.depth;
    b.budget_bytes = c.budget_bytes();
    b.resident = c.resident;
    b.evict = c.evict;
    b.optimizer = c.optimizer;
    return b;
}

std::string cell_impossible_reason(const CellParams& c) {
    const std::string backend_name(enum_name(c.backend));
    const BackendTraits& backend = backend_traits(c.backend);
    if (const std::string why = family_impossible_reason(c); !why.empty()) return why;
    if (const std::string why = training_impossible_reason(c); !why.empty()) return why;
    if (const std::string why = lengths_impossible_reason(c); !why.empty()) return why;
    if (const std::string why = recompute_impossible_reason(c); !why.empty()) return why;
    if (const std::string why = training_only_fusion_reason(c); !why.empty()) return why;
    if (const std::string why = optimizer_impossible_reason(c); !why.empty()) return why;
    if (const std::string why = max_grad_norm_impossible_reason(c); !why.empty()) return why;
    if (const std::string why = split_tf32_impossible_reason(c); !why.empty()) return why;
    if (!backend.computes_in(c.dtype))
        return "the " + backend_name + " backend does not compute in " + std::string(enum_name(c.dtype));
    if (!backend.needs_gpu && !c.variant.is_baseline())
        return "the " + backend_name + " backend runs the baseline variant only (fusions are GPU kernels)";
    if (!backend.needs_gpu && c.activations != Activations::device)
        return "activations = \"managed\" needs a GPU backend";
    if (c.variant.has(Fusion::flash_attention) && c.model.head_dim() > kFlashAttentionMaxHeadDim)
        return "the flash_attention fusion of variant '" + c.variant.text() + "' supports head dimensions up to " +
               std::to_string(kFlashAttentionMaxHeadDim) + "; model '" + c.model.name + "' has " +
               std::to_string(c.model.head_dim());
    return backend.cannot_honour(backend_config(c), unit_bytes(WeightLayout::for_model(c.model), c.dtype));
}

std::string cell_unsupported_reason(const CellParams& c) {
#ifndef SWEETSPOT_HAVE_CUDA
    if (backend_traits(c.backend).needs_gpu)
        return "this sweetspot was built without CUDA, so backend '" + std::string(enum_name(c.backend)) +
               "' is not available";
#endif
    return cell_impossible_reason(c);
}

std::string cell_unavailable_reason(const CellParams& c) {
    std::string why = cell_unsupported_reason(c);
    if (why.empty() && uses_gpu(c)) why = backend_unavailable_reason(c.backend);
    return why;
}

CellOutcome measure_cell(const CellParams& cell, const MeasureOptions& options) {
    CellOutcome out;
    out.set<"started_at">(utc_timestamp());
    const auto t_init = std::chrono::steady_clock::now();
    if (options.spawned_at)
        out.phases.push_back({"start", std::chrono::duration<double>(t_init - *options.spawned_at).count()});
    PhaseClock clock(out.phases);
    options.status.phase("tokens");
    const std::vector<std::int32_t> tokens = cell_tokens(cell, options);
    clock.lap("tokens");
    options.status.phase("setup");
#ifdef SWEETSPOT_HAVE_CUDA
    std::unique_ptr<CellStep> step = uses_gpu(cell) ? make_gpu_step(cell, tokens, options) : make_host_step(cell, tokens);
#else
    std::unique_ptr<CellStep> step = make_host_step(cell, tokens);
#endif
    out.set<"init_s">(std::chrono::duration<double>(std::chrono::steady_clock::now() - t_init).count());
    if (const std::vector<CellPhase> setup = step->setup_phases(); setup.empty()) {
        clock.lap("setup");
    } else {
        out.phases.insert(out.phases.end(), setup.begin(), setup.end());
    }
    measure_steps(cell, *step, options, out);
    // Freeing what the cell placed can take seconds (tens of GB of managed or pinned memory).
    PhaseClock teardown(out.phases);
    options.status.phase("teardown");
    step.reset();
    teardown.lap("teardown");
    out.set<"finished_at">(utc_timestamp());
    return out;
}

int execute_cell(const CellParams& cell, const std::string& scratch_db, const MeasureOptions& options) {
    if (cell.debug_fault != DebugFault::none) inject_fault(cell.debug_fault);
    CellOutcome out;
    int code = kExitOk;
    if (const std::string why = cell_unavailable_reason(cell); !why.empty()) {
        out.status = CellStatus::skipped;
        out.reason = why;
    } else {
        try {
            // The runner leaves the workload's kept reference logits in the scratch database.
            MeasureOptions with_kept = options;
            const auto key = uses_gpu(cell) ? kept_reference_key(cell, cell_tokens(cell, options)) : std::nullopt;
            if (key && std::filesystem::exists(scratch_db))
                with_kept.kept_reference = Store::open_read_only(scratch_db).load_reference(*key);
            out = measure_cell(cell, with_kept);
        } catch (const ManagedMemoryRefused& e) {
            // A safety refusal, not a failed measurement: the cell cannot run on this GPU as asked.
            std::cerr << "sweetspot: " << e.what() << "\n";
            out = CellOutcome{};
            out.status = CellStatus::skipped;
            out.reason = e.what();
        } catch (const std::exception& e) {
            std::cerr << "sweetspot: cell failed: " << e.what() << "\n";
            out = CellOutcome{};
            out.status = CellStatus::failed;
            out.reason = e.what();
            code = kExitFailed;
        }
    }
    options.status.phase("write_and_exit");
    write_outcome(scratch_db, cell, out);
    return code;
}

}  // namespace sweetspot
