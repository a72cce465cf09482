#include "harness/cli/cli.hpp"

#include <unistd.h>

#include <boost/program_options.hpp>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/number_text.hpp"
#include "harness/cli/cell_list.hpp"
#include "harness/cli/compare.hpp"
#include "harness/cli/estimate_table.hpp"
#include "harness/cli/gradients_command.hpp"
#include "harness/cli/logits_command.hpp"
#include "harness/cli/plan.hpp"
#include "harness/cli/report_command.hpp"
#include "harness/cli/slurm_submit.hpp"
#include "harness/cli/summary.hpp"
#include "harness/cli/table.hpp"
#include "harness/cli/trace_export.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/matrix/matrix.hpp"
#include "harness/matrix/shard.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/cell_weights.hpp"
#include "harness/measure/gpu_probe.hpp"
#include "harness/runner/runner.hpp"
#include "harness/store/merge.hpp"
#include "harness/store/store.hpp"
#include "harness/system/child_process.hpp"
#include "harness/system/did_you_mean.hpp"
#include "harness/system/exit_codes.hpp"
#include "harness/system/output_file.hpp"
#include "harness/system/version.hpp"

namespace po = boost::program_options;

namespace sweetspot {
namespace {

constexpr const char* kUsage = R"(sweetspot - find the sweet spot between GPU memory and speed for transformer models

usage: sweetspot <command> [options]

commands:
  run FILE        sweep an experiment matrix (TOML) into a results database (SQLite)
  list FILE       show the cells a matrix expands to, without running them
  estimate FILE   predict each cell's device and host memory before running it (no GPU needed)
  plan FILE       per workload, the fastest measured setting that fits a memory limit (no GPU needed)
  summary DB      print the runs and a per-cell table of a results database
  compare A B     compare the same workloads measured twice: medians, change, significance
  trace DB        write one traced iteration of a cell as a Perfetto/Chrome trace (JSON)
  report DB       draw the figures (PNG, SVG) and an HTML page of a results database
  logits          write the logits of token ids to a .npy file, to compare with other implementations
  gradients       write a training step's loss and float64 gradients of token ids, to compare with other implementations
  submit FILE     run a matrix as a Slurm job array, one shard per task, each into its own database
  merge DB...     combine results databases (shards) into one: merge -o OUT.db SHARD.db...

Run 'sweetspot <command> --help' or 'sweetspot help <command>' for a command's options.
Matrix format: experiments/README.md. Database schema and example queries: results/README.md.
Exit codes: 0 success, 1 a run finished with failed cells or measured nothing, 2 bad input,
130 interrupted.
)";

// A subcommand: its options, positional arguments and what runs it.
struct Command {
    std::string name, synopsis, description;
    po::options_description options;
    po::positional_options_description positional;
};

// Parses argv[first..]; prints help and returns false when --help was given.
// "a, b or c"
std::string alternatives(const std::vector<std::string>& names) {
    std::string out;
    for (std::size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
    return out;
}

// The value of an option that names one of the values of enumeration E.
template <class E>
E enum_option(const po::variables_map& vm, const char* name) {
    const auto value = parse_enum<E>(vm[name].as<std::string>());
    if (!value) throw po::error(std::string("--") + name + " expects " + alternatives(enum_names<E>()));
    return *value;
}

bool parse(Command& cmd, const std::vector<std::string>& args, po::variables_map& vm) {
    cmd.options.add_options()("help,h", "show this help");
    po::store(po::command_line_parser(args).options(cmd.options).positional(cmd.positional).run(), vm);
    if (vm.count("help")) {
        std::cout << "usage: sweetspot " << cmd.name << " " << cmd.synopsis << "\n\n" << cmd.description << "\n\n"
                  << cmd.options;
        return false;
    }
    try {
        po::notify(vm);
    } catch (const po::required_option& e) {
        // A positional argument is named as the synopsis names it, not as the option behind it.
        std::string name = e.get_option_name();
        name.erase(0, name.find_first_not_of('-'));
        for (unsigned i = 0; i < cmd.positional.max_total_count() && i < 8; ++i) {
            if (cmd.positional.name_for_position(i) != name) continue;
            std::string upper;
            for (const char c : name) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            throw po::error("missing " + upper + " (usage: sweetspot " + cmd.name + " " + cmd.synopsis + ")");
        }
        throw;
    }
    return true;
}

// --collector: true for cupti, false for none.
bool collector_choice(const std::string& name) {
    if (name == "cupti") return true;
    if (name == "none") return false;
    throw po::error("--collector expects cupti or none, got '" + name + "'");
}

std::string join_command_line(int argc, char** argv) {
    std::string s;
    for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
    return s;
}

// "0,1,3" (or GPU UUIDs, anything CUDA_VISIBLE_DEVICES takes): one entry per GPU, none twice.
std::vector<std::string> parse_gpu_list(const std::string& text) {
    std::vector<std::string> ids;
    std::istringstream in(text);
    for (std::string id; std::getline(in, id, ',');) {
        if (id.empty() || id.find_first_of(" \t") != std::string::npos)
            throw po::error("--gpus expects GPU ids separated by commas, such as \"0,1\", got '" + text + "'");
        if (std::find(ids.begin(), ids.end(), id) != ids.end())
            throw po::error("--gpus names GPU " + id + " twice in '" + text + "'");
        ids.push_back(id);
    }
    if (ids.empty()) throw po::error("--gpus expects at least one GPU id, such as \"0\"");
    return ids;
}

// --shard i/N: keeps shard i of the cells (harness/matrix/shard.hpp); says so on stderr.
void keep_shard(Matrix& matrix, const po::variables_map& vm) {
    if (!vm.count("shard")) return;
    ShardSpec spec;
    try {
        spec = parse_shard(vm["shard"].as<std::string>());
    } catch (const std::invalid_argument& e) {
        throw po::error(e.what());
    }
    const std::size_t all = matrix.cells.size();
    std::vector<CellParams> kept;
    for (const std::size_t i : shard_positions(matrix.cells, spec)) kept.push_back(matrix.cells[i]);
    matrix.cells = std::move(kept);
    std::cerr << "sweetspot: shard " << spec.index << "/" << spec.count << ": " << matrix.cells.size() << " of " << all
              << " cells\n";
}

// --format: how the commands that print a table print it; `help` says what each format prints,
// and the help adds what csv and json promise other tools.
void add_format_option(Command& cmd, const std::string& help) {
    const std::string machine =
        help + ".\ncsv (RFC 4180) and json: the same keys whatever the cells, named as the database's columns "
               "(latency_median_ms, budget, timeout_s; every axis); numbers unrounded, text as text; a flag is "
               "true/false in json, 1/0 in csv; no value is null in json, an empty field in csv. results/README.md "
               "(\"Machine-readable output\") lists the keys";
    cmd.options.add_options()("format", po::value<std::string>()->default_value("table"), machine.c_str());
}

TableFormat format_option(const po::variables_map& vm) {
    const auto format = parse_table_format(vm["format"].as<std::string>());
    if (!format) throw po::error("--format expects table, csv, json or markdown, got '" + vm["format"].as<std::string>() + "'");
    return *format;
}

// --set: what the commands that read a matrix say of it.
constexpr const char* kSetHelp =
    "give AXIS these values in every sweep, in place of what the matrix says (repeatable), e.g. --set batch=1,2,4";

// The matrix FILE of `vm` with its --set overrides.
Matrix matrix_of(const po::variables_map& vm) {
    return load_matrix(vm["matrix"].as<std::string>(),
                       vm.count("set") ? vm["set"].as<std::vector<std::string>>() : std::vector<std::string>{});
}

int cmd_run(const std::vector<std::string>& args, const std::string& command_line) {
    Command cmd{"run", "FILE [--db PATH] [--only AXIS=VALUE] [--set AXIS=VALUES] [--rerun] [--force] [--timeout DURATION] [--gpus LIST] [--shard I/N] [--progress-every DURATION]",
                "Runs every cell of the matrix FILE, each in its own process, and stores the results.\n"
                "Cells already 'ok' in the database are skipped, so an interrupted sweep resumes\n"
                "where it stopped. Progress (cell i/N, ETA, the running cells' phase and iteration)\n"
                "goes to stderr.",
                po::options_description("options"), {}};
    cmd.options.add_options()
        ("matrix", po::value<std::string>()->required(), "experiment matrix (TOML)")
        ("db", po::value<std::string>(), "results database (default: results/<matrix name>.db)")
        ("rerun", po::bool_switch(), "measure cells again even if they are already ok in the database")
        ("force", po::bool_switch(),
         "run cells predicted not to fit the GPU or the host (otherwise skipped as 'predicted OOM' once the "
         "database holds cells of that GPU to measure the CUDA context and libraries' memory on, or as 'predicted "
         "host OOM' when their page-locked or managed weights exceed the host's available memory)")
        ("timeout", po::value<std::string>(), "per-cell timeout overriding the matrix (\"90s\", \"10m\", seconds)")
        ("only", po::value<std::vector<std::string>>()->composing(),
         "run only the cells with AXIS=VALUE[,VALUE...] (repeatable), e.g. --only model=gpt2_1.5b --only backend=uvm")
        ("set", po::value<std::vector<std::string>>()->composing(), kSetHelp)
        ("allow-oversubscription", po::bool_switch(),
         "let UVM cells allocate more managed memory than the GPU has free. This can hang a shared GPU:\n"
         "use it only on a machine that is yours alone; study oversubscription with the `budget` axis")
        ("collector", po::value<std::string>()->default_value("cupti"),
         "cupti: record kernels, copies, UM counters and NVTX ranges in each cell's traced iterations;\n"
         "none: leave CUPTI alone, e.g. to run a cell under Nsight Systems (only one tool may use it)")
        ("gpus", po::value<std::string>(),
         "GPUs to run cells on side by side, one cell each at a time, as CUDA_VISIBLE_DEVICES names them\n"
         "(\"0,1,2,3\"); default: every GPU the probe sees. Host cells run alone, and cells that stream\n"
         "weights over the host link one at a time (the GPUs of a node share it)")
        ("shard", po::value<std::string>(),
         "run shard i of N (\"2/8\"): the same split on every machine, balanced by each cell's weight bytes times\n"
         "its forwards, for N machines or the tasks of a Slurm array writing N databases")
        ("share-link", po::bool_switch(),
         "let cells that stream weights over the host link run side by side on different GPUs (only where\n"
         "each GPU's link is its own: their bandwidth figures are otherwise each other's)")
        ("progress-every", po::value<std::string>()->default_value("30s"),
         "where stderr is not a terminal (a log, Slurm's output), print what the running cells are doing (phase, "
         "iteration) at most this often, when it has changed; on a terminal it is redrawn in place");
    cmd.positional.add("matrix", 1);
    po::variables_map vm;
    if (!parse(cmd, args, vm)) return kExitOk;

    Matrix matrix = matrix_of(vm);
    if (vm.count("only")) keep_only(matrix, vm["only"].as<std::vector<std::string>>());
    keep_shard(matrix, vm);
    require_loadable_weights(matrix.cells);
    RunOptions opt;
    opt.db_path = vm.count("db") ? vm["db"].as<std::string>() : default_db_path(matrix);
    opt.rerun = vm["rerun"].as<bool>();
    opt.force = vm["force"].as<bool>();
    opt.allow_oversubscription = vm["allow-oversubscription"].as<bool>();
    opt.collect = collector_choice(vm["collector"].as<std::string>());
    opt.command_line = command_line;
    if (vm.count("gpus")) opt.gpus = parse_gpu_list(vm["gpus"].as<std::string>());
    opt.share_link = vm["share-link"].as<bool>();
    opt.progress.columns = terminal_columns(STDERR_FILENO);
    const std::string every = vm["progress-every"].as<std::string>();
    const std::optional<double> every_s = parse_duration_s(every);
    if (!every_s || *every_s < ProgressStyle::min_every_s)
        throw po::error("--progress-every expects a duration of at least " + format_number(ProgressStyle::min_every_s) +
                        " s such as \"30s\", \"5m\" or a number of seconds, got '" + every + "'");
    opt.progress.every_s = *every_s;
    if (vm.count("timeout")) {
        opt.timeout_override_s = parse_duration_s(vm["timeout"].as<std::string>());
        if (!opt.timeout_override_s || *opt.timeout_override_s < AxisLimits::min_timeout_s)
            throw po::error("--timeout expects a duration of at least " + format_number(AxisLimits::min_timeout_s) +
                            " s such as \"90s\", \"10m\" or a number of seconds, got '" + vm["timeout"].as<std::string>() + "'");
    }
    std::cerr << "sweetspot: " << matrix.cells.size() << " cells from " << matrix.path << " -> " << opt.db_path << "\n";
    for (const std::string& note : matrix.notes) std::cerr << "sweetspot: note: " << note << "\n";
    const RunTotals t = run_matrix(matrix, opt, std::cerr);
    if (!t.error.empty()) {
        std::cerr << "sweetspot run: error: " << t.error << "\n"
                  << "sweetspot: the sweep stopped; " << t.ok + t.failed + t.timeout + t.invalid + t.skipped
                  << " cells were stored before. Once the database can be written again, the same command resumes.\n";
        return t.exit_code();
    }
    if (t.run_id) {
        // The cells this run measured, on stdout: what a script or a log keeps.
        auto results = Store::open_read_only(opt.db_path);
        SummaryOptions cells;
        cells.run_id = t.run_id;
        cells.cells_only = true;
        print_summary(results, cells, std::cout);
    }
    std::cerr << "sweetspot: " << t.ok << " ok, " << t.failed << " failed, " << t.timeout << " timed out, " << t.invalid
              << " invalid, " << t.skipped << " skipped, " << t.resumed << " already done"
              << (t.interrupted ? "; interrupted, run the same command again to resume" : "") << "\n"
              << "sweetspot: results in " << opt.db_path << " (sweetspot summary " << opt.db_path << ")\n";
    if (t.nothing_measured()) {
        const auto most = std::max_element(t.skipped_because.begin(), t.skipped_because.end(),
                                           [](const auto& a, const auto& b) { return a.second < b.second; });
        std::cerr << "sweetspot run: nothing was measured: every cell was skipped, " << most->second << " of "
                  << t.skipped << " because " << most->first << "\n";
    }
    return t.exit_code();
}

// `sbatch` on PATH, or empty.
std::string find_on_path(const std::string& program) {
    const char* path = std::getenv("PATH");
    std::istringstream dirs(path ? path : "");
    for (std::string dir; std::getline(dirs, dir, ':');) {
        const auto candidate = std::filesystem::path(dir.empty() ? "." : dir) / program;
        if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
    return {};
}

int cmd_submit(const std::vector<std::string>& all_args) {
    // Everything after "--" is for sbatch, as it is.
    const auto dashes = std::find(all_args.begin(), all_args.end(), std::string("--"));
    const std::vector<std::string> args(all_args.begin(), dashes);
    const std::vector<std::string> extra(dashes == all_args.end() ? dashes : dashes + 1, all_args.end());
    Command cmd{"submit",
                "FILE [--tasks N] [--partition P] [--gpus-per-task G] [--array-parallelism K] [--time T] [--results DIR] "
                "[--only AXIS=VALUE] [--dry-run] [-- SBATCH OPTIONS...]",
                "Submits one Slurm job array for the matrix FILE. Task i runs shard i of N (run --shard i/N) into a\n"
                "database on node-local disk and copies it to the results folder when it ends. Warned before its\n"
                "time limit (USR1) or preempted (TERM), a task stops its sweep cleanly, copies back what it finished\n"
                "and requeues itself; the requeued task resumes from that copy. The matrix and the sweetspot binary\n"
                "must be readable from the compute nodes. --dry-run prints the batch script instead of submitting it.",
                po::options_description("options"), {}};
    cmd.options.add_options()
        ("matrix", po::value<std::string>()->required(), "experiment matrix (TOML)")
        ("tasks", po::value<int>(), "array tasks, one shard each (default: the cells, at most 8)")
        ("partition", po::value<std::string>(), "Slurm partition")
        ("gpus-per-task", po::value<int>(), "GPUs each task gets (default: 1 when the matrix has GPU cells, else 0)")
        ("array-parallelism", po::value<int>(), "at most this many tasks running at once")
        ("time", po::value<std::string>(), "each task's time limit, as sbatch takes it (\"4:00:00\")")
        ("results", po::value<std::string>(), "where the shard databases go (default: results/<matrix name>-shards)")
        ("only", po::value<std::vector<std::string>>()->composing(), "only the cells with AXIS=VALUE[,VALUE...] (repeatable)")
        ("set", po::value<std::vector<std::string>>()->composing(), kSetHelp)
        ("dry-run", po::bool_switch(), "print the batch script, submit nothing");
    cmd.positional.add("matrix", 1);
    po::variables_map vm;
    if (!parse(cmd, args, vm)) return kExitOk;

    Matrix m = matrix_of(vm);
    std::vector<std::string> only;
    if (vm.count("only")) {
        only = vm["only"].as<std::vector<std::string>>();
        keep_only(m, only);
    }
    if (m.cells.empty()) throw po::error("the matrix has no cells to submit");
    const int cells = static_cast<int>(m.cells.size());
    SlurmJob job;
    job.tasks = vm.count("tasks") ? vm["tasks"].as<int>() : std::min(cells, 8);
    if (job.tasks < 1 || job.tasks > cells)
        throw po::error("--tasks expects 1 to " + std::to_string(cells) + " (one shard per task, " + std::to_string(cells) +
                        " cells), got " + std::to_string(job.tasks));
    if (vm.count("array-parallelism")) {
        job.array_parallelism = vm["array-parallelism"].as<int>();
        if (*job.array_parallelism < 1) throw po::error("--array-parallelism expects at least 1");
    }
    job.gpus_per_task = vm.count("gpus-per-task") ? vm["gpus-per-task"].as<int>()
                                                  : (std::any_of(m.cells.begin(), m.cells.end(), uses_gpu) ? 1 : 0);
    if (job.gpus_per_task < 0) throw po::error("--gpus-per-task expects 0 or more");
    if (vm.count("partition")) job.partition = vm["partition"].as<std::string>();
    if (vm.count("time")) job.time = vm["time"].as<std::string>();
    job.sweetspot = self_executable();
    job.matrix = std::filesystem::absolute(m.path).lexically_normal().string();
    job.name = std::filesystem::path(default_db_path(m)).stem().string();
    job.results_dir = std::filesystem::absolute(vm.count("results") ? vm["results"].as<std::string>()
                                                                     : "results/" + job.name + "-shards")
                          .lexically_normal()
                          .string();
    job.only = only;
    if (vm.count("set")) job.overrides = vm["set"].as<std::vector<std::string>>();
    job.extra_sbatch = extra;
    const std::string script = slurm_batch_script(job);
    if (vm["dry-run"].as<bool>()) {
        std::cout << script;
        return kExitOk;
    }

    const std::string sbatch = find_on_path("sbatch");
    if (sbatch.empty())
        throw std::runtime_error("sbatch is not on PATH: submit from a Slurm login node (--dry-run prints the script)");
    std::filesystem::create_directories(job.results_dir);
    const std::string script_path = job.results_dir + "/" + job.name + ".sbatch";
    {
        OutputFile file(script_path);
        std::ofstream(file.temp_path()) << script;
        file.commit();
    }
    ChildSpec spec;
    spec.argv = {sbatch, "--parsable", script_path};
    spec.log_path = job.results_dir + "/sbatch.log";
    spec.timeout_s = 120;
    const ChildResult r = run_child(spec, std::atomic<bool>{false});
    const std::string said = file_tail(spec.log_path, 4000);
    if (r.exit_code != 0) throw std::runtime_error("sbatch " + r.describe() + ": " + said);
    std::cout << "sweetspot: submitted job array " << said.substr(0, said.find_first_of(";\n")) << ": " << job.tasks
              << " tasks over " << cells << " cells (" << script_path << ")\n"
              << "sweetspot: task i writes " << job.results_dir << "/" << job.name << ".shard-i-of-" << job.tasks << ".db\n"
              << "sweetspot: once they have ended, combine them with: sweetspot merge -o results/" << job.name << ".db '"
              << job.results_dir << "/" << job.name << ".shard-'*-of-" << job.tasks << ".db\n";
    return kExitOk;
}

// One side of a comparison as the command line names it. A run the database lacks would compare
// nothing, which --fail-if-slower would pass.
CompareSide compare_side(const std::string& text) {
    const CompareSide side = parse_compare_side(text);
    if (!side.run_id) return side;
    Store store = Store::open_read_only(side.path);
    std::vector<std::string> runs;
    bool found = false;
    for (auto st = store.db().prepare("SELECT run_id FROM runs ORDER BY run_id"); st.step();) {
        runs.push_back(std::to_string(st.int64(0)));
        found = found || st.int64(0) == *side.run_id;
    }
    if (!found)
        throw std::invalid_argument("'" + text + "': " + side.path + " has no run " + std::to_string(*side.run_id) +
                                    " (its runs: " + (runs.empty() ? "none" : comma_list(runs)) + "); `sweetspot summary " +
                                    side.path + "` lists them");
    return side;
}

// Why a comparison matched no workload, naming the side that lacks them.
std::string nothing_compared(const CompareSide& a, const CompareSide& b, const CompareCounts& counts) {
    const std::string side_a = "A (" + a.name() + ")", side_b = "B (" + b.name() + ")";
    if (counts.only_a == 0 && counts.only_b == 0) return "neither " + side_a + " nor " + side_b + " has a workload measured ok";
    if (counts.only_a == 0) return side_a + " has no workload measured ok";
    if (counts.only_b == 0) return side_b + " has no workload measured ok";
    return side_a + " and " + side_b + " have no workload in common (" + std::to_string(counts.only_a) + " only in A, " +
           std::to_string(counts.only_b) + " only in B): they differ in a workload or placement axis (model, backend, "
           "dtype, batch...); compare measurements of the same matrix";
}

int cmd_compare(const std::vector<std::string>& args) {
    Command cmd{"compare",
                "A B [--alpha P] [--threshold PCT] [--fail-if-slower PCT [--allow-untestable]] [--format table|csv|json|markdown]",
                "Compares two sets of measurements of the same workloads: A and B are results databases, one\n"
                "run of one (DB@RUN, run ids as `sweetspot summary DB` lists them), or the runs of one matrix\n"
                "in one (DB@MATRIX, by the matrix's name). Cells are matched by\n"
                "their parameters, not by how long they were measured; for each workload measured ok in both,\n"
                "prints the median latencies, B / A (the median of the ratios of B's iterations to A's) with its\n"
                "confidence interval, the p-value of a two-sided Mann-Whitney U test on the timed iterations, and\n"
                "the verdict: faster, slower, same, or untestable when the iterations are too few for any p below\n"
                "--alpha (3 and 3 give 0.1 at best), with how many would do. GPU ops timed by\n"
                "`bench_kernels --db` in both are compared the same way, matched by op, dtype and shape.",
                po::options_description("options"), {}};
    cmd.options.add_options()
        ("a", po::value<std::string>()->required(), "the baseline: a results database, DB@RUN or DB@MATRIX")
        ("b", po::value<std::string>()->required(), "the measurements compared with it")
        ("alpha", po::value<double>()->default_value(0.05, "0.05"), "significance level: a difference counts when p is below it")
        ("threshold", po::value<double>()->default_value(2.0, "2"),
         "a significant change smaller than this many percent reads 'same'")
        ("fail-if-slower", po::value<double>(),
         "exit 1 when a workload is significantly slower in B by more than this many percent, or is untestable "
         "(for CI); exit 2 when no workload was measured ok in both")
        ("allow-untestable", po::bool_switch(), "with --fail-if-slower: pass despite untestable workloads, whose slowdowns go unseen");
    add_format_option(cmd, "table (with the sides and the method), or the table alone as markdown, csv or json");
    cmd.positional.add("a", 1).add("b", 1);
    po::variables_map vm;
    if (!parse(cmd, args, vm)) return kExitOk;
    CompareOptions opt;
    opt.alpha = vm["alpha"].as<double>();
    opt.threshold_pct = vm["threshold"].as<double>();
    if (!(opt.alpha > 0 && opt.alpha < 1)) throw po::error("--alpha expects a probability between 0 and 1");
    if (!(opt.threshold_pct >= 0)) throw po::error("--threshold expects a percentage >= 0");
    opt.format = format_option(vm);
    const CompareSide a = compare_side(vm["a"].as<std::string>()), b = compare_side(vm["b"].as<std::string>());
    const CompareCounts counts = print_comparison(a, b, opt, std::cout);
    if (vm.count("fail-if-slower") && counts.matched == 0 && counts.kernels_matched == 0) {
        std::cerr << "sweetspot compare: --fail-if-slower: nothing compared: " << nothing_compared(a, b, counts) << "\n";
        return kExitBadInput;
    }
    if (vm.count("fail-if-slower") && counts.worst_slowdown_pct > vm["fail-if-slower"].as<double>()) {
        std::cerr << "sweetspot compare: B is slower than A by " << fixed(counts.worst_slowdown_pct, 1)
                  << " % on a workload (--fail-if-slower " << fixed(vm["fail-if-slower"].as<double>(), 1) << ")\n";
        return kExitFailed;
    }
    if (vm.count("fail-if-slower") && counts.untestable > 0) {
        const std::string why = std::to_string(counts.untestable) + " workload(s) have too few timed iterations for any p below " +
                                fixed(opt.alpha, 3) + ", so a slowdown there cannot be seen";
        if (!vm["allow-untestable"].as<bool>()) {
            std::cerr << "sweetspot compare: " << why << " (the table says how many iterations would do): measure more, "
                      << "or pass --allow-untestable to pass without them\n";
            return kExitFailed;
        }
        std::cerr << "sweetspot compare: passing although " << why << " (--allow-untestable)\n";
    }
    return kExitOk;
}

int cmd_merge(const std::vector<std::string>& args) {
    Command cmd{"merge", "-o OUT.db SHARD.db...",
                "Combines results databases (the shards of run --shard or sweetspot submit) into OUT.db, creating\n"
                "it if needed. Runs keep their metadata (and bench_kernels its timings), cells their iterations, phases,\n"
                "events and history.\n"
                "Merging a database again adds nothing. A cell measured in two databases keeps the newer\n"
                "measurement; the older goes to cell_history. The shards are only read (one of an older schema\n"
                "version through an upgraded copy in TMPDIR), and all are checked before OUT.db is touched: if one\n"
                "is refused, OUT.db stays as it was. OUT.db may not be one of the shards.",
                po::options_description("options"), {}};
    cmd.options.add_options()
        ("output,o", po::value<std::string>(), "the database to merge into (required; --out is the same)")
        ("out", po::value<std::string>(), "the same as --output")
        ("shards", po::value<std::vector<std::string>>()->required(), "the databases to merge");
    cmd.positional.add("shards", -1);
    po::variables_map vm;
    if (!parse(cmd, args, vm)) return kExitOk;
    // Named, never taken from the shards' places: `merge s1.db s2.db` would otherwise write into s1.db.
    if (vm.count("output") == vm.count("out"))
        throw po::error(vm.count("out") ? "give the database to merge into once, with -o or --out"
                                        : "name the database to merge into with -o OUT.db (usage: sweetspot merge " +
                                              cmd.synopsis + ")");
    const std::string out_path = vm[vm.count("out") ? "out" : "output"].as<std::string>();
    const auto shards = vm["shards"].as<std::vector<std::string>>();
    for (const std::string& shard : shards) {
        if (!std::filesystem::exists(shard)) throw po::error("no such database: " + shard);
        // By the file, not its name: a link or another spelling of a shard's path is that shard.
        if (std::filesystem::exists(out_path) && std::filesystem::equivalent(shard, out_path))
            throw po::error("the output " + out_path + " is the shard " + shard +
                            "; merge only reads its shards, so name a new database (or one that is none of them) with -o");
    }
    const std::vector<MergeCounts> counts = merge_databases(out_path, shards);
    for (std::size_t i = 0; i < shards.size(); ++i) {
        const MergeCounts& c = counts[i];
        std::cout << shards[i] << ": " << c.cells_added << " cells added, " << c.cells_already_there << " already there, "
                  << c.conflicts << " measured in both (the older kept in cell_history), " << c.history_added
                  << " earlier measurements added to cell_history, " << c.runs_added << " runs added\n";
    }
    return kExitOk;
}

// A command that reads a matrix and prints something per cell without running it (list,
// estimate): FILE and --only besides the command's own options, then `print` with the matrix's
// cells and the options.
int matrix_table_command(
    Command cmd, const std::vector<std::string>& args,
    const std::function<void(const std::vector<CellParams>&, const po::variables_map&, std::ostream&)>& print) {
    cmd.options.add_options()
        ("matrix", po::value<std::string>()->required(), "experiment matrix (TOML)")
        ("only", po::value<std::vector<std::string>>()->composing(), "only the cells with AXIS=VALUE[,VALUE...] (repeatable)")
        ("set", po::value<std::vector<std::string>>()->composing(), kSetHelp)
        ("shard", po::value<std::string>(), "only shard i of N (\"2/8\"), as run --shard splits the cells");
    add_format_option(cmd, "table: for people; markdown, csv or json: the table alone, sizes in bytes in csv and json");
    cmd.positional.add("matrix", 1);
    po::variables_map vm;
    if (!parse(cmd, args, vm)) return kExitOk;

    Matrix m = matrix_of(vm);
    if (vm.count("only")) keep_only(m, vm["only"].as<std::vector<std::string>>());
    keep_shard(m, vm);
    require_loadable_weights(m.cells);
    if (format_option(vm) != TableFormat::text) {
        print(m.cells, vm, std::cout);
        return kExitOk;
    }
    std::cout << m.name << " (" << m.path << "): " << m.cells.size() << " cells";
    if (m.excluded) std::cout << ", " << m.excluded << " excluded";
    if (m.duplicates) std::cout << ", " << m.duplicates << " duplicates dropped";
    if (!m.overrides.empty()) std::cout << "\nset on the command line, in every sweep: " << comma_list(m.overrides);
    for (const std::string& note : m.notes) std::cout << "\nnote: " << note;
    std::cout << "\n\n";
    print(m.cells, vm, std::cout);
    return kExitOk;
}

// The --calibration option of list and estimate.
void add_calibration_option(Command& cmd) {
    cmd.options.add_options()("calibration", po::value<std::string>(),
                              "a results database of the GPU the cells are meant for: its cells measure the CUDA "
                              "context and libraries' memory, which predicted peaks add");
}

// The fixed cost the results database at `path` measured, for the one GPU and driver it holds.
FixedCost calibration_from(const std::string& path) {
    Store store = Store::open_read_only(path);
    const std::vector<FixedCost> costs = measured_fixed_costs(store.db());
    if (costs.empty())
        throw po::error("--calibration: " + path + " has no ok device or explicit-copy cell with its device memory "
                        "recorded, so nothing to measure the CUDA context and libraries from");
    if (costs.size() > 1) {
        std::string gpus;
        for (const FixedCost& c : costs) gpus += (gpus.empty() ? "" : ", ") + c.gpu + " (" + c.driver + ")";
        throw po::error("--calibration: " + path + " holds cells of several GPUs or drivers (" + gpus +
                        "); give a database of the GPU the cells are meant for");
    }
    return costs.front();
}

// The bytes an option such as --fit or --memory gives ("80GiB", or a number of bytes).
std::int64_t memory_amount(const po::variables_map& vm, const std::string& option) {
    const std::string text = vm[option].as<std::string>();
    const auto amount = Budget::parse(text);
    if (!amount || amount->kind != Budget::Kind::bytes)
        throw po::error("--" + option + " expects an amount of memory such as \"80GiB\" or a number of bytes, got '" +
                        text + "'");
    return amount->resolve(0);
}

// The fixed cost --calibration DB measured, if given.
std::optional<FixedCost> calibration(const po::variables_map& vm) {
    if (!vm.count("calibration")) return std::nullopt;
    return calibration_from(vm["calibration"].as<std::string>());
}

int cmd_list(const std::vector<std::string>& args) {
    Command cmd{"list", "FILE [--only AXIS=VALUE] [--set AXIS=VALUES] [--calibration DB]",
                "Prints the cells the matrix FILE expands to, with their keys, weight sizes and predicted device\n"
                "memory (their peak with --calibration), and whether each can run in this build.",
                po::options_description("options"), {}};
    add_calibration_option(cmd);
    return matrix_table_command(std::move(cmd), args, [](const auto& cells, const po::variables_map& vm, std::ostream& out) {
        print_cell_list(cells, calibration(vm), format_option(vm), out);
    });
}

int cmd_estimate(const std::vector<std::string>& args) {
    Command cmd{"estimate", "FILE [--only AXIS=VALUE] [--set AXIS=VALUES] [--calibration DB [--fit MEMORY]]",
                "Predicts, before anything runs and without a GPU, the memory each cell of the matrix FILE\n"
                "needs: on the device the weights as its backend places them, the activations, the attention\n"
                "scores and the GEMM workspace; on the host the pinned and managed memory. With --calibration,\n"
                "also each cell's peak: those terms plus the CUDA context and the libraries' memory measured on\n"
                "that GPU; with --fit, what fits a GPU of that much memory instead: the largest batch and seq,\n"
                "and for a packed cell (lengths drawn, packing = \"packed\") the most real tokens one packed batch\n"
                "may hold, the sequences the cell draws packed back to back (its rows are its tokens).",
                po::options_description("options"), {}};
    add_calibration_option(cmd);
    cmd.options.add_options()
        ("fit", po::value<std::string>(),
         "instead: for each cell, the largest batch and seq whose peak fits this much GPU memory (\"80GiB\", bytes), "
         "for a packed cell also the most real tokens one packed batch may hold, and the smallest budget its backend "
         "runs at; needs --calibration");
    return matrix_table_command(std::move(cmd), args, [](const auto& cells, const po::variables_map& vm, std::ostream& out) {
        const std::optional<FixedCost> fixed = calibration(vm);
        if (!vm.count("fit")) {
            print_memory_estimates(cells, fixed, format_option(vm), out);
            return;
        }
        const std::int64_t capacity = memory_amount(vm, "fit");
        if (!fixed)
            throw po::error("--fit needs --calibration DB: the CUDA context and libraries' memory is measured on the GPU, "
                            "not guessed");
        print_fits(cells, capacity, *fixed, format_option(vm), out);
    });
}

int cmd_plan(const std::vector<std::string>& args) {
    Command cmd{"plan", "FILE --memory AMOUNT --db RESULTS [--calibration DB] [--host-memory AMOUNT] [--only AXIS=VALUE]",
                "For each workload of the matrix FILE, the setting (backend, budget and the other placement\n"
                "axes, variant, batch) with the most tokens/s among those whose predicted memory fits AMOUNT of GPU\n"
                "memory: what fits from the memory estimator (nothing runs), what is fast from the measured cells\n"
                "of RESULTS. The cells that fit but RESULTS has not measured are named.",
                po::options_description("options"), {}};
    add_calibration_option(cmd);
    cmd.options.add_options()
        ("memory", po::value<std::string>()->required(), "the GPU memory a setting may need (\"40GiB\", bytes)")
        ("host-memory", po::value<std::string>(), "also the host memory its process may need")
        ("db", po::value<std::string>()->required(),
         "the results database whose ok cells' tokens/s rank the settings; also the calibration unless --calibration");
    return matrix_table_command(std::move(cmd), args, [](const auto& cells, const po::variables_map& vm, std::ostream& out) {
        PlanLimits limits;
        limits.device_bytes = memory_amount(vm, "memory");
        if (vm.count("host-memory")) limits.host_bytes = memory_amount(vm, "host-memory");
        const std::string db = vm["db"].as<std::string>();
        if (!std::filesystem::exists(db)) throw po::error("no such database: " + db);
        Store results = Store::open_read_only(db);
        const bool gpu = std::any_of(cells.begin(), cells.end(), [](const CellParams& c) { return uses_gpu(c); });
        std::optional<FixedCost> fixed;
        if (gpu) fixed = calibration_from(vm.count("calibration") ? vm["calibration"].as<std::string>() : db);
        const auto plans = plan_workloads(cells, fixed, measured_cells(results.db()), limits);
        print_plan(cells, plans, limits, format_option(vm), out);
    });
}

// The cell_id that --cell names: a cell key (16 hex digits, as `list` and the database show it) or
// the start of one key alone, or a cell_id (as `summary` numbers the cells; a rerun keeps them).
std::int64_t named_cell(Store& store, const std::string& name) {
    const auto refused = [&] {
        return po::error("--cell expects a cell_id or the key of a cell in the database (or its first digits), got '" +
                         escape_controls(name) + "'");
    };
    if (name.empty()) throw refused();
    const bool digits = name.size() <= 18 && std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) {
        auto by_id = store.db().prepare("SELECT cell_id FROM cells WHERE cell_id = ?");
        by_id.bind(1, static_cast<std::int64_t>(std::stoll(name)));
        if (by_id.step()) return by_id.int64(0);
    }
    std::vector<std::pair<std::int64_t, std::string>> keys;
    auto by_key = store.db().prepare("SELECT cell_id, cell_key FROM cells WHERE substr(cell_key, 1, length(?1)) = ?1 LIMIT 6");
    by_key.bind(1, name);
    while (by_key.step()) keys.emplace_back(by_key.int64(0), by_key.text(1));
    if (keys.size() == 1) return keys.front().first;
    if (keys.size() > 1) {
        std::vector<std::string> some;
        for (std::size_t i = 0; i < std::min<std::size_t>(keys.size(), 5); ++i) some.push_back(keys[i].second);
        throw po::error("--cell " + name + " begins " + (keys.size() > 5 ? "more than 5" : std::to_string(keys.size())) +
                        " cell keys (" + comma_list(some) + (keys.size() > 5 ? ", ..." : "") + "); give more of the key");
    }
    if (digits) return static_cast<std::int64_t>(std::stoll(name));  // no such cell: the command says so
    throw refused();
}

int cmd_summary(const std::vector<std::string>& args) {
    Command cmd{"summary", "DB [--run ID | --cell ID|KEY] [--history] [--format table|csv|json|markdown]",
                "Prints the runs stored in the results database DB and a table of its cells\n"
                "(median / p10 / p90 latency, tokens/s, numerical check), then the cells\n"
                "that are not ok with their reasons, and those faster than a bound they are divided\n"
                "by (the report's bounds, asked of python3). A cell's row is its latest measurement;\n"
                "--history also lists the earlier ones (a rerun keeps them). With --cell, prints what was recorded in that\n"
                "cell's traced iterations instead, in the form of the nsys stats reports\n"
                "cuda_gpu_kern_sum, nvtx_sum, nvtx_gpu_proj_sum (the NVTX ranges as the GPU ran them)\n"
                "and um_total_sum.",
                po::options_description("options"), {}};
    cmd.options.add_options()
        ("db", po::value<std::string>()->required(), "results database")
        ("run", po::value<std::int64_t>(), "only the cells measured by this run")
        ("cell", po::value<std::string>(),
         "kernels, NVTX ranges (host and GPU time) and Unified Memory totals of this cell: its cell_id (a rerun keeps "
         "it), its key, or the key's first digits")
        ("history", po::bool_switch(), "also the earlier measurements of each cell (cell_history), oldest first");
    add_format_option(cmd, "table: every section, for people; markdown, csv or json: the cells table alone, or with --history "
                           "the earlier measurements'");
    cmd.positional.add("db", 1);
    po::variables_map vm;
    if (!parse(cmd, args, vm)) return kExitOk;
    SummaryOptions opt;
    opt.format = format_option(vm);
    opt.history = vm["history"].as<bool>();
    if (vm.count("cell") && opt.format != TableFormat::text) throw po::error("--cell prints its reports as tables only");
    auto store = Store::open_read_only(vm["db"].as<std::string>());
    if (vm.count("run")) opt.run_id = vm["run"].as<std::int64_t>();
    if (vm.count("cell")) opt.cell_id = named_cell(store, vm["cell"].as<std::string>());
    print_summary(store, opt, std::cout);
    return kExitOk;
}

// A file or folder beside the database `db`: its path without the extension, then `suffix`
// (results/demo.db, "-report": results/demo-report).
std::string beside_db(const std::string& db, const std::string& suffix) {
    std::filesystem::path p(db);
    return (p.parent_path() / (p.stem().string() + suffix)).string();
}

int cmd_trace(const std::vector<std::string>& args) {
    Command cmd{"trace", "DB --cell ID|KEY [--iteration N] [-o FILE]",
                "Writes one traced iteration of a cell as a Chrome/Perfetto trace (JSON; open it in\n"
                "ui.perfetto.dev or chrome://tracing): a track per GPU stream, UM migrations and page\n"
                "faults on their own tracks, the NVTX ranges nested, the CUDA API calls on a track per\n"
                "thread. Arrows lead from each launch to its kernel or copy (cells recorded since schema\n"
                "version 15) and from a kernel to the page faults it raised. Times in us from the\n"
                "iteration start.\n"
                "The cell needs trace_iterations > 0 and the cupti collector.",
                po::options_description("options"), {}};
    cmd.options.add_options()
        ("db", po::value<std::string>()->required(), "results database")
        ("cell", po::value<std::string>()->required(),
         "cell_id (see `sweetspot summary`; a rerun keeps it), cell key, or the key's first digits")
        ("iteration", po::value<int>()->default_value(0), "which traced iteration (0-based)")
        ("output,o", po::value<std::string>(),
         "trace file to write (default: beside DB, DB's name with -cellID-iterationN.trace.json)");
    cmd.positional.add("db", 1);
    po::variables_map vm;
    if (!parse(cmd, args, vm)) return kExitOk;
    const int iteration = vm["iteration"].as<int>();
    if (iteration < 0)
        throw po::error("--iteration expects a traced iteration's number, 0 or more; got " + std::to_string(iteration));
    auto store = Store::open_read_only(vm["db"].as<std::string>());
    const std::int64_t cell_id = named_cell(store, vm["cell"].as<std::string>());
    const std::string path =
        vm.count("output") ? vm["output"].as<std::string>()
                           : beside_db(vm["db"].as<std::string>(), "-cell" + std::to_string(cell_id) + "-iteration" +
                                                                      std::to_string(iteration) + ".trace.json");
    OutputFile file(path);
    std::ofstream out(file.temp_path());
    if (!out) throw std::runtime_error("cannot write " + path);
    const auto t = write_trace(store, cell_id, iteration, out);
    out.close();
    if (!out) throw std::runtime_error("writing " + path + " failed");
    file.commit();
    std::cout << path << ": " << t.kernels << " kernels and " << t.copies << " copies on " << t.streams << " streams, "
              << t.migrations << " UM migrations, " << t.gpu_fault_groups << " GPU page-fault groups, " << t.cpu_faults
              << " CPU page faults, " << t.ranges << " NVTX ranges, "
              << (t.launches_recorded ? std::to_string(t.api_calls) + " CUDA API calls; " + std::to_string(t.launch_flows) +
                                            " launch arrows"
                                      : std::string("no CUDA API calls (recorded since schema version 15); no launch arrows"))
              << ", " << t.fault_flows << " fault arrows\n";
    if (t.timing)
        std::cout << "It shows a traced iteration, not a timed one: " << traced_timing_text(*t.timing) << "\n";
    return kExitOk;
}

int cmd_logits(const std::vector<std::string>& args) {
    Command cmd{"logits", "--weights PATH [--model NAME] [--tokens IDS]... [--backend NAME] [--dtype T] -o FILE.npy",
                "Runs one forward and writes its logits, float32 [batch, seq, vocab], to a NumPy .npy file,\n"
                "so that other implementations (e.g. transformers) can be compared with ours. Each --tokens\n"
                "is one sequence; without any, --batch sequences of --seq random ids from --seed are used.\n"
                "The output is also checked against our own reference (exit code 1 when it fails).",
                po::options_description("options"), {}};
    cmd.options.add_options()
        ("weights", po::value<std::string>()->default_value("synthetic"),
         "a GPT-2 checkpoint: a .safetensors file or a directory with config.json and model.safetensors\n"
         "or a sharded checkpoint's model.safetensors.index.json (as save_pretrained writes them); or synthetic")
        ("model", po::value<std::string>(), "a built-in model; default: the shape in the checkpoint's config.json")
        ("tokens", po::value<std::vector<std::string>>()->composing(), "one sequence of token ids, e.g. 464,2068,7586 (repeatable)")
        ("batch", po::value<int>()->default_value(1), "sequences of random ids, without --tokens")
        ("seq", po::value<int>()->default_value(16), "random ids per sequence, without --tokens")
        ("seed", po::value<std::uint64_t>()->default_value(1), "seed of the random ids and of synthetic weights")
        ("backend", po::value<std::string>()->default_value("host"), alternatives(enum_names<BackendId>()).c_str())
        ("dtype", po::value<std::string>()->default_value("fp32"), (alternatives(enum_names<DType>()) + " (GPU backends)").c_str())
        ("variant", po::value<std::string>()->default_value("baseline"),
         "fused-kernel variant (GPU backends), as the matrix's variant axis: a preset or fusions joined by '+'")
        ("tf32", po::bool_switch(), "fp32 GEMMs on TF32 tensor cores (GPU backends)")
        ("split-tf32", po::bool_switch(), "fp32 GEMMs as three TF32 products of split operands (GPU backends)")
        ("allow-oversubscription", po::bool_switch(), "lift the managed-memory guard of the UVM backends")
        ("output,o", po::value<std::string>()->required(), ".npy file to write");
    po::variables_map vm;
    if (!parse(cmd, args, vm)) return kExitOk;
    LogitsRequest r;
    r.weights = vm["weights"].as<std::string>();
    if (vm.count("model")) r.model = vm["model"].as<std::string>();
    if (vm.count("tokens"))
        for (const auto& t : vm["tokens"].as<std::vector<std::string>>()) r.tokens.push_back(parse_token_list(t));
    r.batch = vm["batch"].as<int>();
    r.seq = vm["seq"].as<int>();
    r.seed = vm["seed"].as<std::uint64_t>();
    r.backend = enum_option<BackendId>(vm, "backend");
    r.dtype = enum_option<DType>(vm, "dtype");
    const auto variant = Variant::parse(vm["variant"].as<std::string>());
    if (!variant) throw po::error("--variant expects " + find_axis("variant")->expects);
    r.variant = *variant;
    r.tf32 = vm["tf32"].as<bool>();
    r.split_tf32 = vm["split-tf32"].as<bool>();
    r.allow_oversubscription = vm["allow-oversubscription"].as<bool>();
    r.output = vm["output"].as<std::string>();
    return write_logits(r, std::cout);
}

int cmd_gradients(const std::vector<std::string>& args) {
    Command cmd{"gradients",
                "--weights PATH [--model NAME] --tokens IDS --targets IDS... [--dropout P] [--weight-decay W]\n"
                "[--max-grad-norm N] -o DIR",
                "Computes the mean cross-entropy of --targets given --tokens, its gradient for every\n"
                "parameter, and the weights after one training step (the gradients clipped to a global\n"
                "norm of --max-grad-norm, then AdamW: lr 3e-4, betas 0.9 and 0.95, eps 1e-8, as a training cell) with\n"
                "the float64 reference (plain loops in double on the CPU), and writes them to DIR as .npy\n"
                "files: loss.npy, one per tensor, and one per tensor in DIR/updated, named as in the\n"
                "family's checkpoints (our [out, in] layout; lm_head untied from the token embedding).\n"
                "Each --tokens is one sequence, each --targets the ids it should predict, position by\n"
                "position. For comparing other implementations' training steps with ours\n"
                "(tests/check_transformers_gradients.py does it with PyTorch autograd and\n"
                "torch.optim.AdamW).",
                po::options_description("options"), {}};
    cmd.options.add_options()
        ("weights", po::value<std::string>()->default_value("synthetic"),
         "a GPT-2 checkpoint: a .safetensors file or a directory with config.json and model.safetensors\n"
         "or model.safetensors.index.json; or synthetic")
        ("model", po::value<std::string>(), "a built-in model; default: the shape in the checkpoint's config.json")
        ("tokens", po::value<std::vector<std::string>>()->composing(), "one sequence of token ids, e.g. 464,2068,7586 (repeatable)")
        ("targets", po::value<std::vector<std::string>>()->composing(), "the ids that sequence should predict (one per --tokens)")
        ("dropout", po::value<float>()->default_value(0.0f), "GPT-2's dropouts, with sweetspot's masks")
        ("seed", po::value<std::uint64_t>()->default_value(1), "seed of synthetic weights and of the dropout masks")
        ("weight-decay", po::value<float>()->default_value(0.0f), "AdamW's weight decay, on the matrices only")
        ("max-grad-norm", po::value<float>()->default_value(1.0f, "1"),
         "the global gradient norm the step clips to, as a training cell's max_grad_norm; 0: no clipping")
        ("output,o", po::value<std::string>()->required(), "folder to create for the .npy files");
    po::variables_map vm;
    if (!parse(cmd, args, vm)) return kExitOk;
    GradientsRequest r;
    r.weights = vm["weights"].as<std::string>();
    if (vm.count("model")) r.model = vm["model"].as<std::string>();
    if (vm.count("tokens"))
        for (const auto& t : vm["tokens"].as<std::vector<std::string>>()) r.tokens.push_back(parse_token_list(t));
    if (vm.count("targets"))
        for (const auto& t : vm["targets"].as<std::vector<std::string>>()) r.targets.push_back(parse_token_list(t));
    r.dropout = vm["dropout"].as<float>();
    r.seed = vm["seed"].as<std::uint64_t>();
    r.weight_decay = vm["weight-decay"].as<float>();
    r.max_grad_norm = vm["max-grad-norm"].as<float>();
    if (!(r.max_grad_norm >= 0) || !std::isfinite(r.max_grad_norm))
        throw po::error("--max-grad-norm expects a norm > 0, or 0 for no clipping");
    r.output = vm["output"].as<std::string>();
    return write_gradients(r, std::cout);
}

int cmd_report(const std::vector<std::string>& args) {
    Command cmd{"report", "DB [-o DIR] [--timeline-cell ID]",
                "Draws the figures of the results database DB into DIR, each as PNG and SVG, and writes\n"
                "DIR/index.html (self-contained: run metadata, the figures with captions, a sortable table\n"
                "of the cells). Figures the database has no data for are left out, saying why. Needs\n"
                "python3 with matplotlib and pandas (scripts/install-deps.sh installs them).",
                po::options_description("options"), {}};
    cmd.options.add_options()
        ("db", po::value<std::string>()->required(), "results database")
        ("output,o", po::value<std::string>(),
         "folder for the figures and index.html (created; default: beside DB, DB's name with -report)")
        ("timeline-cell", po::value<std::int64_t>(),
         "cell_id whose first traced iteration the timeline shows (default: the traced cell with the most kinds of activity)");
    cmd.positional.add("db", 1);
    po::variables_map vm;
    if (!parse(cmd, args, vm)) return kExitOk;
    const std::string db = vm["db"].as<std::string>();
    ReportRequest request{db, vm.count("output") ? vm["output"].as<std::string>() : beside_db(db, "-report"), std::nullopt};
    if (vm.count("timeline-cell")) request.timeline_cell = vm["timeline-cell"].as<std::int64_t>();
    std::cout.flush();
    return run_report(request, std::cerr);
}

// The cell's child process (started by `run`; not for direct use).
int cmd_cell(const std::vector<std::string>& args) {
    Command cmd{"_cell", "--scratch DB --cell TEXT", "Internal: measures one cell in this process.",
                po::options_description("options"), {}};
    cmd.options.add_options()
        ("scratch", po::value<std::string>()->required(), "database for this cell's outcome")
        ("cell", po::value<std::string>()->required(), "the cell's canonical text")
        ("run-label", po::value<std::string>()->default_value("run"), "text of the NVTX range around the cell")
        ("spawned-at", po::value<std::int64_t>(), "steady-clock nanoseconds when the parent started this process")
        ("status-fd", po::value<int>(), "descriptor to write the cell's phase and iteration to, a line each")
        ("allow-oversubscription", po::bool_switch(), "lift the managed-memory guard")
        ("collector", po::value<std::string>()->default_value("cupti"), "cupti or none");
    po::variables_map vm;
    if (!parse(cmd, args, vm)) return kExitOk;
    const auto cell = CellParams::from_canonical(vm["cell"].as<std::string>());
    MeasureOptions options;
    options.allow_oversubscription = vm["allow-oversubscription"].as<bool>();
    options.collect = collector_choice(vm["collector"].as<std::string>());
    options.run_label = vm["run-label"].as<std::string>();
    if (vm.count("spawned-at"))
        options.spawned_at = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(vm["spawned-at"].as<std::int64_t>()));
    if (vm.count("status-fd")) options.status = StatusChannel(vm["status-fd"].as<int>());
    return execute_cell(cell, vm["scratch"].as<std::string>(), options);
}

// GPU facts and the link probe, in their own process (started by `run`; not for direct use).
int cmd_probe(const std::vector<std::string>& args) {
    Command cmd{"_probe", "[--link]", "Internal: prints GPU facts as key=value lines.", po::options_description("options"), {}};
    cmd.options.add_options()("link", po::bool_switch(), "also measure pinned host<->device bandwidth");
    po::variables_map vm;
    if (!parse(cmd, args, vm)) return kExitOk;
#ifdef SWEETSPOT_HAVE_CUDA
    const GpuFacts facts = measure_gpu_facts(vm["link"].as<bool>());
#else
    GpuFacts facts;
    facts.note = "built without CUDA";
#endif
    std::cout << format_gpu_facts(facts);
    return facts.name ? kExitOk : kExitFailed;
}

}  // namespace

int cli_main(int argc, char** argv) {
    if (argc < 2) {
        std::cerr << kUsage;
        return kExitBadInput;
    }
    const std::string command = argv[1];
    // `sweetspot help COMMAND` is `sweetspot COMMAND --help`.
    if (command == "help" && argc > 2 && std::string(argv[2]) != "help") {
        std::vector<std::string> help = {argv[0], argv[2], "--help"};
        std::vector<char*> args;
        for (std::string& a : help) args.push_back(a.data());
        return cli_main(static_cast<int>(args.size()), args.data());
    }
    if (command == "--help" || command == "-h" || command == "help") {
        std::cout << kUsage;
        return kExitOk;
    }
    if (command == "--version") {
        std::cout << "sweetspot " << kVersion << " (" << git_revision() << ")\n";
        return kExitOk;
    }
    const std::vector<std::string> args(argv + 2, argv + argc);
    try {
        const std::string command_line = join_command_line(argc, argv);
        // The commands a user types, then the ones sweetspot runs itself (in a cell's process, the probe).
        const std::vector<std::pair<std::string, std::function<int()>>> commands = {
            {"run", [&] { return cmd_run(args, command_line); }}, {"list", [&] { return cmd_list(args); }},
            {"estimate", [&] { return cmd_estimate(args); }},    {"plan", [&] { return cmd_plan(args); }},
            {"summary", [&] { return cmd_summary(args); }},      {"compare", [&] { return cmd_compare(args); }},
            {"trace", [&] { return cmd_trace(args); }},          {"report", [&] { return cmd_report(args); }},
            {"logits", [&] { return cmd_logits(args); }},        {"gradients", [&] { return cmd_gradients(args); }},
            {"submit", [&] { return cmd_submit(args); }},        {"merge", [&] { return cmd_merge(args); }},
            {"_cell", [&] { return cmd_cell(args); }},           {"_probe", [&] { return cmd_probe(args); }},
        };
        std::vector<std::string> names;
        for (const auto& [name, run] : commands) {
            if (name == command) return run();
            if (!name.starts_with('_')) names.push_back(name);
        }
        std::cerr << "sweetspot: unknown command '" << escape_controls(command) << "'" << suggestion(command, names)
                  << "\n\n" << kUsage;
        return kExitBadInput;
    } catch (const MatrixError& e) {
        std::cerr << e.what() << "\n";
        return kExitBadInput;
    } catch (const po::error& e) {
        std::cerr << "sweetspot " << command << ": " << e.what() << "\n"
                  << "Run 'sweetspot " << command << " --help' for its options.\n";
        return kExitBadInput;
    } catch (const std::exception& e) {
        std::cerr << "sweetspot " << command << ": error: " << e.what() << "\n";
        return kExitBadInput;
    }
}

}  // namespace sweetspot
