// Every op entry (tests/ops/op_entry.hpp) in every dtype and bench shape: the median of 20
// CUDA-event-timed runs after 3 warm-ups, and its rate, TFLOP/s for an op with model flops and
// GB/s (its least traffic over the time) for a memory-bound one. Prints a Markdown table.
//   bench_kernels                       every entry
//   bench_kernels --op layernorm        the entries named layernorm (repeatable)
#include <cstdio>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "kernels/compute/cuda_resources.hpp"
#include "ops/op_entry.hpp"
#include "ops/op_support.hpp"

using namespace sweetspot;
namespace po = boost::program_options;

int main(int argc, char** argv) {
    po::options_description options("bench_kernels: each GPU op's time and rate, from the op entries (tests/ops)");
    options.add_options()("help", "print this help")(
        "op", po::value<std::vector<std::string>>()->default_value({}, ""), "only the entry of this name (repeatable)");
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

    const CudaStream stream;
    std::printf("| op | dtype | shape | ms | TFLOP/s | GB/s |\n|---|---|---|---|---|---|\n");
    for (const ops::OpEntry& entry : ops::op_entries()) {
        if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), entry.name) == wanted.end()) continue;
        for (const DType dtype : entry.dtypes) {
            for (const ops::OpShape& shape : entry.bench_shapes) {
                const auto op = entry.make(shape, dtype, stream.get());
                const double ms = ops::median_ms(stream.get(), [&] { op->run(stream.get()); });
                const ops::OpCost cost = entry.cost(shape, dtype);
                const std::string dtype_name(enum_name(dtype));
                if (cost.flops > 0) {
                    std::printf("| %s | %s | %s | %.4f | %.1f | |\n", entry.name.c_str(), dtype_name.c_str(),
                                shape.text.c_str(), ms, cost.flops / ms / 1e9);
                } else {
                    std::printf("| %s | %s | %s | %.4f | | %.0f |\n", entry.name.c_str(), dtype_name.c_str(),
                                shape.text.c_str(), ms, cost.bytes / ms / 1e6);
                }
                std::fflush(stdout);
            }
        }
    }
    return 0;
}
