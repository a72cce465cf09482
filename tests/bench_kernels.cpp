// Every op entry (tests/ops/op_entry.hpp) in every dtype and bench shape: the median of 20
// CUDA-event-timed runs after 3 warm-ups, and its rate, TFLOP/s for an op with model flops and
// GB/s (its least traffic over the time) for a memory-bound one. Prints a Markdown table.
//   bench_kernels                       every entry
//   bench_kernels --op layernorm        the entries named layernorm (repeatable)
//   bench_kernels --db results.db       also writes each row's 20 timed runs as a run of that
//                                       results database (kernel_timings), so that
//                                       `sweetspot compare A.db B.db` judges a kernel change
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "harness/store/kernel_timings.hpp"
#include "harness/store/store.hpp"
#include "kernels/compute/cuda_check.hpp"
#include "kernels/compute/cuda_resources.hpp"
#include "ops/op_entry.hpp"
#include "ops/op_support.hpp"

using namespace sweetspot;
namespace po = boost::program_options;

namespace {

// The run that --db records: this machine, its GPU, this build and the command.
RunInfo bench_run(int argc, char** argv) {
    RunInfo info = host_run_info();
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, current_device()));
    info.gpu_name = prop.name;
    info.gpu_memory_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
    int runtime = 0;
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    info.cuda_runtime = std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
    for (int i = 0; i < argc; ++i) info.command_line += (i ? " " : "") + std::string(argv[i]);
    return info;
}

void print_row(const ops::OpEntry& entry, DType dtype, const ops::OpShape& shape, double ms, const ops::OpCost& cost) {
    const std::string dtype_name(enum_name(dtype));
    if (cost.flops > 0) {
        std::printf("| %s | %s | %s | %.4f | %.1f | |\n", entry.name.c_str(), dtype_name.c_str(), shape.text.c_str(), ms,
                    cost.flops / ms / 1e9);
    } else {
        std::printf("| %s | %s | %s | %.4f | | %.0f |\n", entry.name.c_str(), dtype_name.c_str(), shape.text.c_str(), ms,
                    cost.bytes / ms / 1e6);
    }
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    po::options_description options("bench_kernels: each GPU op's time and rate, from the op entries (tests/ops)");
    options.add_options()("help", "print this help")(
        "op", po::value<std::vector<std::string>>()->default_value({}, ""), "only the entry of this name (repeatable)")(
        "db", po::value<std::string>(),
        "also write each row's timed runs to this results database (created if missing) as one run, for "
        "`sweetspot compare`");
    po::variables_map args;
    try {
        po::store(po::parse_command_line(argc, argv, options), args);
        po::notify(args);
    } catch (const po::error& e) {
        std::cerr << "bench_kernels: " << e.what() << "\n" << options;
        return 2;
    }
    if (args.count("help")) {
        std::cout << options;
        return 0;
    }
    const auto& wanted = args["op"].as<std::vector<std::string>>();
    std::set<std::string> known;
    for (const ops::OpEntry& entry : ops::op_entries()) known.insert(entry.name);
    for (const std::string& name : wanted) {
        if (!known.contains(name)) {
            std::cerr << "bench_kernels: --op " << name << " names no op entry; the entries are:";
            for (const std::string& k : known) std::cerr << " " << k;
            std::cerr << "\n";
            return 2;
        }
    }
    std::optional<Store> store;
    if (args.count("db")) {
        try {
            store.emplace(Store::open(args["db"].as<std::string>()));
        } catch (const std::exception& e) {
            std::cerr << "bench_kernels: --db " << args["db"].as<std::string>() << ": " << e.what() << "\n";
            return 2;
        }
    }

    std::int64_t run = 0;
    try {
        const CudaStream stream;
        if (store) run = store->begin_run(bench_run(argc, argv));
        std::printf("| op | dtype | shape | ms | TFLOP/s | GB/s |\n|---|---|---|---|---|---|\n");
        for (const ops::OpEntry& entry : ops::op_entries()) {
            if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), entry.name) == wanted.end()) continue;
            for (const DType dtype : entry.dtypes) {
                for (const ops::OpShape& shape : entry.bench_shapes) {
                    const auto op = entry.make(shape, dtype, stream.get());
                    KernelTiming timing{entry.name, std::string(enum_name(dtype)), shape.text, 0, 0,
                                        ops::timed_ms(stream.get(), [&] { op->run(stream.get()); })};
                    const ops::OpCost cost = entry.cost(shape, dtype);
                    timing.flops = cost.flops;
                    timing.bytes = cost.bytes;
                    std::vector<double> sorted = timing.ms;
                    std::sort(sorted.begin(), sorted.end());
                    print_row(entry, dtype, shape, sorted[sorted.size() / 2], cost);
                    if (store) insert_kernel_timing(store->db(), run, timing);
                }
            }
        }
    } catch (const std::exception& e) {
        // A run begun is closed with why it stopped (no GPU, a CUDA error, a full disk).
        if (store && run != 0) store->finish_run(run, "interrupted", e.what());
        std::cerr << "bench_kernels: " << e.what() << "\n";
        return 1;
    }
    if (store) store->finish_run(run, "finished");
    return 0;
}
