// The GPU training step (kernels/compute/gpu_train_step.hpp) on synthetic weights in a device
// backend, or a streaming one at a share of the weights (`--backend explicit-copy --budget 0.25`,
// the optimizer on the host, two streams, a look-ahead of 2): ms of the forward, the backward and
// the update, and tokens per second, for a built-in
// model (optionally cut to fewer layers, to fit a small memory budget: the per-layer time then
// scales to the whole model) at each batch given. Medians of the timed steps after warm-up steps,
// CUDA events around each phase (the update's one host synchronization included); each recompute
// setting given (recompute.hpp) at each batch, so that its cost in time and its saving in
// activation bytes read side by side; each variant given (Tempo's inplace_ln, inplace_gelu beside
// the same fusions without them); and each optimizer placement given (`host`: AdamW on the host's
// cores, each unit's gradient down and new weights up, whose bytes it prints), the host's update
// either ended before the next forward or overlapped with it (`--overlap`: both, side by side; the
// overlapped step's forward then holds what the update did not hide; with `--max-grad-norm 0` in
// fp32 or bf16 the backward starts it, beside the backward itself). With the optimizer on the host it
// also prints where the update's thread spent its time (GpuTrainStep::host_update_times): its span
// from its first unit to its last, AdamW's passes within it, and its waits for gradients and slots.
//   bench_train_step --model gpt2_small --batch 4 --batch 8 --seq 1024 --variant flash_attention
//   bench_train_step --model gpt2_1.5b --batch 8 --recompute none --recompute gelu --recompute block
//   bench_train_step --model gpt2_1.5b --batch 8 --optimizer device --optimizer host
//   bench_train_step --model gpt2_1.5b --batch 4 --optimizer host --overlap
//   bench_train_step --model gpt3_6.7b --batch 1 --backend explicit-copy --budget 0.25 --optimizer host --overlap
//   bench_train_step --model gpt3_6.7b --batch 1 --backend explicit-copy --budget 0.25 --optimizer host --overlap
//       --max-grad-norm 0
//   bench_train_step --model gpt2_1.5b --batch 16 --variant flash_attention --variant flash_attention+tempo
#include <cuda_runtime_api.h>

#include <cstdio>
#include <sstream>
#include <span>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "backends/backend_registry.hpp"
#include "backends/residency_plan.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "kernels/compute/gpu_synthetic_weights.hpp"
#include "kernels/compute/gpu_train_step.hpp"
#include "kernels/model/model_config.hpp"
#include "kernels/model/synthetic_weights.hpp"

using namespace sweetspot;
namespace po = boost::program_options;

namespace {

constexpr std::uint64_t kSeed = 7;

// Where the weights are: the backend, and for a streaming one the share of the weights its budget
// holds.
struct Placement {
    BackendId backend = BackendId::device;
    double budget_share = 1.0;
};

void bench(const ModelConfig& model, DType dtype, const Variant& variant, Recompute recompute, StateHome optimizer,
           bool overlap, float max_grad_norm, const Placement& placement, int batch, int seq, int warmup, int steps) {
    const CudaStream stream;
    const WeightLayout layout = WeightLayout::for_model(model);
    BackendConfig config;
    config.backend = placement.backend;
    config.dtype = dtype;
    config.compute_stream = stream.get();
    std::int64_t weight_bytes = 0;
    for (const std::int64_t b : unit_bytes(layout, dtype)) weight_bytes += b;
    config.budget_bytes = placement.backend == BackendId::device
                              ? std::int64_t{1} << 62
                              : static_cast<std::int64_t>(placement.budget_share * static_cast<double>(weight_bytes));
    config.streams = 2;
    config.prefetch_depth = 2;
    config.optimizer = optimizer;
    auto backend = make_backend(config);
    const UnitFiller fill =
        UnitFiller([&](int u, std::span<float> dst) { fill_synthetic_unit(model, layout, u, kSeed, dst); })
            .with_device_fill([&](int u, DType d, void* dst, CUstream_st* s) {
                gpu::fill_synthetic_unit(model, layout, u, kSeed, d, dst, s);
            });
    backend->place(layout, fill, UnitSchedule::training(layout.unit_count()));
    GpuTrainOptions options;
    options.variant = variant;
    options.recompute = recompute;
    options.settings.max_grad_norm = max_grad_norm;
    GpuTrainStep step(model, layout, dtype, BatchShape::rectangular(batch, seq), stream.get(), options);
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch) * seq), targets(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = static_cast<std::int32_t>((i * 7919) % static_cast<std::size_t>(model.vocab_size));
        targets[i] = static_cast<std::int32_t>((i * 104729 + 1) % static_cast<std::size_t>(model.vocab_size));
    }
    step.set_batch(tokens, targets);
    const CudaEvent start(CudaEvent::Timing::on), forwarded(CudaEvent::Timing::on), backwarded(CudaEvent::Timing::on),
        updated(CudaEvent::Timing::on);
    std::vector<double> forward_ms, backward_ms, update_ms, step_ms, span_ms, adamw_ms, wait_ms;
    // An overlapped update is done once the next backward (or finish_update) has waited for it.
    const auto read_update = [&] {
        const HostUpdateTimes t = step.host_update_times();
        span_ms.push_back(t.span_ms);
        adamw_ms.push_back(t.adamw_ms);
        wait_ms.push_back(t.wait_ms);
    };
    for (int s = 0; s < warmup + steps; ++s) {
        backend->reset_residency();  // a streaming backend's slots start each step empty
        start.record(stream.get());
        step.forward(*backend);
        forwarded.record(stream.get());
        step.backward(*backend, overlap);
        if (overlap && s > warmup) read_update();
        backwarded.record(stream.get());
        step.update(*backend, overlap);
        updated.record(stream.get());
        updated.synchronize();
        if (s < warmup) continue;
        if (!overlap) read_update();
        forward_ms.push_back(forwarded.ms_since(start));
        backward_ms.push_back(backwarded.ms_since(forwarded));
        update_ms.push_back(updated.ms_since(backwarded));
        step_ms.push_back(updated.ms_since(start));
    }
    step.finish_update();
    if (overlap) read_update();
    const auto median = [](const std::vector<double>& ms) { return LatencyStats::of(ms).median; };
    const double total = median(step_ms);
    const LinkBytes link = step.update_link_bytes();
    std::printf("%-12s %2d layers %-6s %-16s %s %.0f%% recompute %-9s optimizer %-6s%-11s clip %g batch %3d seq %5d  forward "
                "%8.2f  backward %8.2f  update %7.2f  step %8.2f ms  %9.0f tokens/s  loss %.3f  activations %.2f GiB  "
                "link down %.2f GB up %.2f GB",
                model.name.c_str(), model.n_layer, std::string(enum_name(dtype)).c_str(), variant.text().c_str(),
                std::string(enum_name(placement.backend)).c_str(), 100.0 * placement.budget_share,
                std::string(enum_name(recompute)).c_str(), std::string(enum_name(optimizer)).c_str(),
                overlap ? " overlapped" : "", static_cast<double>(max_grad_norm), batch, seq,
                median(forward_ms), median(backward_ms), median(update_ms), total,
                static_cast<double>(batch) * seq / (total / 1000.0), step.loss(),
                static_cast<double>(step.activation_bytes()) / (1 << 30), static_cast<double>(link.to_host) / 1e9,
                static_cast<double>(link.to_device) / 1e9);
    if (optimizer == StateHome::host)
        std::printf("  host update: span %.2f adamw %.2f waits %.2f ms", median(span_ms), median(adamw_ms),
                    median(wait_ms));
    std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
    po::options_description options("bench_train_step: the GPU training step's phases and tokens/s");
    options.add_options()("help", "this text")(
        "model", po::value<std::string>()->default_value("gpt2_small"), "a built-in model")(
        "layers", po::value<int>()->default_value(0), "cut the model to this many layers (0: all)")(
        "batch", po::value<std::vector<int>>()->default_value({4}, "4"), "batch (repeatable)")(
        "seq", po::value<int>()->default_value(1024), "sequence length")(
        "dtype", po::value<std::string>()->default_value("bf16"), "fp32, fp16 or bf16")(
        "variant", po::value<std::vector<std::string>>()->default_value({"flash_attention"}, "flash_attention"),
        "a variant the training step takes (repeatable)")(
        "recompute", po::value<std::vector<std::string>>()->default_value({"gelu"}, "gelu"),
        "none, gelu, attention, mlp or block (repeatable)")(
        "optimizer", po::value<std::vector<std::string>>()->default_value({"device"}, "device"),
        "where AdamW runs: device or host (repeatable)")(
        "overlap", "with the optimizer on the host, also time its update overlapped with the next forward (and, "
                   "without clipping in fp32 or bf16, started by the backward)")(
        "max-grad-norm", po::value<float>()->default_value(1.0f, "1"), "the global gradient norm to clip to; 0: none")(
        "backend", po::value<std::string>()->default_value("device"), "device, explicit-copy or uvm-prefetch")(
        "budget", po::value<double>()->default_value(1.0), "a streaming backend's budget, a share of the weights")(
        "warmup", po::value<int>()->default_value(2), "untimed steps")(
        "steps", po::value<int>()->default_value(5), "timed steps");
    po::variables_map args;
    try {
        po::store(po::parse_command_line(argc, argv, options), args);
        po::notify(args);
    } catch (const po::error& e) {
        std::fprintf(stderr, "bench_train_step: %s\n", e.what());
        return 2;
    }
    if (args.count("help")) {
        std::printf("%s", (std::ostringstream() << options).str().c_str());
        return 0;
    }
    auto model = find_builtin_model(args["model"].as<std::string>());
    const auto dtype = parse_enum<DType>(args["dtype"].as<std::string>());
    std::vector<Variant> variants;
    for (const std::string& name : args["variant"].as<std::vector<std::string>>()) {
        const auto v = Variant::parse(name);
        if (!v) {
            std::fprintf(stderr, "bench_train_step: unknown variant '%s'\n", name.c_str());
            return 2;
        }
        variants.push_back(*v);
    }
    std::vector<Recompute> recomputes;
    for (const std::string& name : args["recompute"].as<std::vector<std::string>>()) {
        const auto r = parse_enum<Recompute>(name);
        if (!r) {
            std::fprintf(stderr, "bench_train_step: unknown recompute setting '%s' (none, gelu, attention, mlp, block)\n",
                         name.c_str());
            return 2;
        }
        recomputes.push_back(*r);
    }
    std::vector<StateHome> optimizers;
    for (const std::string& name : args["optimizer"].as<std::vector<std::string>>()) {
        const auto o = parse_enum<StateHome>(name);
        if (!o) {
            std::fprintf(stderr, "bench_train_step: unknown optimizer placement '%s' (device, host)\n", name.c_str());
            return 2;
        }
        optimizers.push_back(*o);
    }
    if (!model || !dtype || args["steps"].as<int>() < 1) {
        std::fprintf(stderr, "bench_train_step: unknown model or dtype, or no timed steps\n");
        return 2;
    }
    if (const int layers = args["layers"].as<int>(); layers > 0) model->n_layer = layers;
    Placement placement;
    placement.budget_share = args["budget"].as<double>();
    if (const auto b = parse_enum<BackendId>(args["backend"].as<std::string>());
        b && (*b == BackendId::device || *b == BackendId::explicit_copy || *b == BackendId::uvm_prefetch) &&
        placement.budget_share > 0.0 && placement.budget_share <= 1.0) {
        placement.backend = *b;
    } else {
        std::fprintf(stderr, "bench_train_step: --backend is device, explicit-copy or uvm-prefetch, and --budget a share "
                             "in (0, 1]\n");
        return 2;
    }
    try {
        for (const int batch : args["batch"].as<std::vector<int>>())
            for (const Variant& variant : variants)
                for (const Recompute recompute : recomputes)
                    for (const StateHome optimizer : optimizers)
                        for (const bool overlap : {false, true}) {
                            if (overlap && (optimizer != StateHome::host || !args.count("overlap"))) continue;
                            bench(*model, *dtype, variant, recompute, optimizer, overlap,
                                  args["max-grad-norm"].as<float>(), placement, batch,
                                  args["seq"].as<int>(), args["warmup"].as<int>(), args["steps"].as<int>());
                        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_train_step: %s\n", e.what());
        return 1;
    }
    return 0;
}
