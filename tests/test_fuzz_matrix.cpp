// Fuzzes the matrix reader with generated and mutated matrix files: in process, a few thousand
// through parse_matrix; then a few hundred through the sweetspot binary, `list` and `run`. The
// seed is fixed, so every run of the test reads the same files and a failure can be replayed.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "harness/matrix/matrix.hpp"
#include "harness/store/store.hpp"
#include "test_support.hpp"

using namespace sweetspot;
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kSeed = 0x5eed5;
constexpr int kCases = 3000;
constexpr int kListCases = 120;  // of the cases, this many through `sweetspot list`
constexpr int kRunCases = 100;   // and this many rejected ones through `sweetspot run`
// A parse of any matrix, even one at the cell cap with exclusions, takes about a second of CPU
// time; the rest is room for a slower core. CPU time, not wall time, so other work on the machine
// does not fail the check.
constexpr double kMaxParseSeconds = 3.0;

double cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}
constexpr long kMaxPeakRssKiB = 1L << 20;  // 1 GiB for all the in-process parses

using Rng = std::mt19937_64;

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

std::size_t pick(Rng& rng, std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); }

template <class T>
const T& pick(Rng& rng, const std::vector<T>& items) {
    return items[pick(rng, items.size())];
}

bool chance(Rng& rng, double p) { return std::bernoulli_distribution(p)(rng); }

// The valid files of experiments/ and tests/data/matrix/good/, the malformed ones of
// tests/data/matrix/bad/, and the inline matrices of test_matrix.cpp.
std::vector<std::string> seed_matrices() {
    std::vector<std::string> seeds;
    for (const char* dir : {"experiments", "tests/data/matrix/good", "tests/data/matrix/bad"}) {
        std::vector<fs::path> files;
        for (const auto& entry : fs::directory_iterator(test::source_path(dir))) {
            if (entry.path().extension() == ".toml") files.push_back(entry.path());
        }
        std::sort(files.begin(), files.end());  // directory order differs between machines
        for (const auto& f : files) seeds.push_back(read_text(f));
    }
    seeds.insert(seeds.end(), {
        "",
        "[defaults]\nprefetch = \"jit\"\nbudget = \"12GiB\"\ntimeout = \"1.5m\"\nseed = 0\nstreams = 0\n\n"
        "[[sweep]]\nprefetch = [4, \"off\"]\n",
        "[[sweep]]\nprefetch = [\"2\", 3]\nbudget = [\"1KiB\", \"50%\"]\ntimeout = \"1m\"\n\n"
        "[[exclude]]\nprefetch = 2\nbudget = 1024\ntimeout = 60\n",
        "[[sweep]]\nname = \"a\"\ntimeout = \"10m\"\n\n[[sweep]]\nname = \"b\"\ntimeout = 30\n",
        "[[sweep]]\nbatch = 1\n[[sweep]]\nname = \"big\"\nbatch = 2\n[[sweep]]\nbatch = 3\n",
        "[[models]]\nname = \"m\"\nlayers = 2\nhidden = 32\nheads = 4\nvocab = 96\npositions = 24\nln_eps = 1e-6\n"
        "[defaults]\nmodel = \"m\"\nseq = 16\n",
        "sweep = [ { batch = [1, 2] }, { seq = [16, 32], exclude = [ { seq = 16 } ] } ]\n",
    });
    return seeds;
}

// ---- What mutations write ----

const std::vector<std::string> kKeys = {
    "name", "description", "defaults", "models", "sweep", "exclude", "base", "layers", "hidden", "heads", "vocab",
    "positions", "ln_eps", "model", "variant", "backend", "dtype", "batch", "seq", "streams", "prefetch", "budget",
    "resident", "evict", "tf32", "activations", "mode", "weights", "warmups", "iterations", "trace_iterations", "seed",
    "timeout", "debug_fault", "batchsize", "\"\"", "\"a\\u0000b\"", "\"ba\\u001btch\"", "\"\\u00e9\"", "a.b",
    "sweep.name", "models.name", "\"two\\nlines\"",
};

const std::vector<std::string> kValues = {
    "0", "1", "-1", "2", "3", "7", "64", "16384", "16385", "131072", "131073", "1048576", "1048577", "2147483647",
    "2147483648", "-2147483648", "9223372036854775807", "-9223372036854775808", "10000000", "1e-300", "1e308",
    "1e-12", "1e-13", "0.5", "-0.0", "inf", "-inf", "nan", "1.5", "true", "false", "\"\"", "\"tiny\"",
    "\"tiny_odd\"", "\"gpt2_small\"", "\"gpt3_13b\"", "\"host\"", "\"uvm\"", "\"device\"", "\"fp16\"", "\"jit\"",
    "\"off\"", "\"3\"", "\"50%\"", "\"0%\"", "\"150%\"", "\"1e-30%\"", "\"12GiB\"", "\"2.01KB\"", "\"8192TiB\"",
    "\"8193TiB\"", "\"12XB\"", "\"0.5B\"", "\"90s\"", "\"1.5m\"", "\"0s\"", "\"1e400s\"", "\"\\u0000\"",
    "\"\\u001b[2J\"", "\"a\\nb\"", "\"\\u007f\"", "\"\\u00e9t\\u00e9\"", "\"../../escaped\"", "\"x\\u0000y\"",
    "\"synthetic\"", "\"nope.safetensors\"", "[]", "[[]]", "[1, [2]]", "{}", "{ batch = 1 }", "[ { batch = 1 } ]",
    "1979-05-27", "07:32:00", "1979-05-27T07:32:00Z", "'literal'", "\"\"\"multi\nline\"\"\"", "0x7fffffff",
    "1_000", "+5",
};

// Bytes spliced in raw: control bytes, NUL, a lone continuation byte, an overlong encoding,
// multi-byte UTF-8, TOML punctuation.
const std::vector<std::string> kRawBytes = {
    std::string(1, '\0'), "\x1b", "\x1b[31m", "\n", "\r", "\t", "\x7f", "\x01", "\x80", "\xc0\xaf", "\xff",
    "\xc3\xa9", "\xe2\x80\xae", "\xf0\x9f\x98\x80", "[", "]", "[[", "]]", "=", "\"", "'", "{", "}", ",", "#", ".",
    "\\", "\"\"\"",
};

// "[1, 2, ...]" of `count` integers.
std::string int_list(std::size_t count) {
    std::string out = "[";
    for (std::size_t i = 0; i < count; ++i) out += (i ? ", " : "") + std::to_string(i + 1);
    return out + "]";
}

// `count` integers, or as often strings of them.
std::string list_of(Rng& rng, std::size_t count) {
    if (chance(rng, 0.7)) return int_list(count);
    std::string out = "[";
    for (std::size_t i = 0; i < count; ++i) out += (i ? ", \"" : "\"") + std::to_string(i + 1) + "\"";
    return out + "]";
}

// Mostly short lists; now and then one long enough to meet the cell cap.
std::size_t list_length(Rng& rng) {
    const double r = std::uniform_real_distribution<double>(0, 1)(rng);
    if (r < 0.7) return 1 + pick(rng, 5);
    if (r < 0.95) return 5 + pick(rng, 45);
    return 200 + pick(rng, 5000);
}

std::string any_value(Rng& rng) {
    if (chance(rng, 0.15)) return list_of(rng, list_length(rng));
    if (chance(rng, 0.1)) return "[" + pick(rng, kValues) + ", " + pick(rng, kValues) + "]";
    return pick(rng, kValues);
}

std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> lines;
    std::string line;
    std::istringstream in(text);
    while (std::getline(in, line)) lines.push_back(line);
    return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
}

// A table built from the pools: a sweep, a model, an exclusion or defaults.
std::string random_table(Rng& rng) {
    static const std::vector<std::string> headers = {"[[sweep]]", "[[models]]", "[[exclude]]", "[defaults]",
                                                     "[[sweep.exclude]]", "[sweep]", "[models]"};
    std::string out = pick(rng, headers) + "\n";
    const std::size_t keys = pick(rng, 5);
    for (std::size_t i = 0; i < keys; ++i) out += pick(rng, kKeys) + " = " + any_value(rng) + "\n";
    return out;
}

// One random change to the text.
std::string mutate(Rng& rng, const std::string& text, const std::vector<std::string>& seeds) {
    std::vector<std::string> lines = split_lines(text);
    const auto line_index = [&] { return pick(rng, lines.size()); };
    switch (pick(rng, 12)) {
        case 0:  // another value for a key
        case 1: {
            if (lines.empty()) break;
            std::string& l = lines[line_index()];
            const auto eq = l.find('=');
            if (eq != std::string::npos) l = l.substr(0, eq + 1) + " " + any_value(rng);
            break;
        }
        case 2: {  // another key for a value
            if (lines.empty()) break;
            std::string& l = lines[line_index()];
            const auto eq = l.find('=');
            if (eq != std::string::npos) l = pick(rng, kKeys) + " " + l.substr(eq);
            break;
        }
        case 3: {  // a line twice: duplicate keys, duplicate tables
            if (lines.empty()) break;
            const std::size_t i = line_index();
            lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(i), lines[i]);
            break;
        }
        case 4:  // a line removed
            if (!lines.empty()) lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(line_index()));
            break;
        case 5:  // truncated anywhere, even inside a string or a multi-byte character
            return text.substr(0, text.empty() ? 0 : pick(rng, text.size()));
        case 6: {  // raw bytes spliced in
            const std::size_t at = text.empty() ? 0 : pick(rng, text.size() + 1);
            return text.substr(0, at) + pick(rng, kRawBytes) + text.substr(at);
        }
        case 7:  // two lines swapped
            if (lines.size() >= 2) std::swap(lines[line_index()], lines[line_index()]);
            break;
        case 8:  // a table added
            lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(lines.empty() ? 0 : line_index()), random_table(rng));
            break;
        case 9: {  // a value's type changed: quoted, unquoted, made a table
            if (lines.empty()) break;
            std::string& l = lines[line_index()];
            const auto eq = l.find('=');
            if (eq == std::string::npos) break;
            std::string v = l.substr(eq + 1);
            const std::size_t first = v.find_first_not_of(' ');
            v = first == std::string::npos ? "" : v.substr(first);
            if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
            else v = chance(rng, 0.5) ? "\"" + v + "\"" : "{ x = " + v + " }";
            l = l.substr(0, eq + 1) + " " + v;
            break;
        }
        case 10: {  // spliced with another seed
            const std::string& other = pick(rng, seeds);
            return text.substr(0, text.empty() ? 0 : pick(rng, text.size())) +
                   other.substr(other.empty() ? 0 : pick(rng, other.size()));
        }
        default: {  // a list grown or shrunk
            if (lines.empty()) break;
            std::string& l = lines[line_index()];
            const auto eq = l.find('=');
            if (eq != std::string::npos) l = l.substr(0, eq + 1) + " " + list_of(rng, list_length(rng));
            break;
        }
    }
    return join_lines(lines);
}

// A value of the right kind for `axis`: a list or a single value, now and then one of the pool.
std::string value_for(Rng& rng, const std::string& axis) {
    static const std::map<std::string, std::vector<std::string>> valid = {
        {"model", {"\"tiny\"", "\"tiny_odd\"", "\"gpt2_small\"", "\"m0\"", "\"m1\""}},
        {"variant", {"\"baseline\"", "\"all\""}},
        {"backend", {"\"host\"", "\"uvm\"", "\"device\"", "\"explicit-copy\""}},
        {"dtype", {"\"fp32\"", "\"fp16\"", "\"bf16\""}},
        {"prefetch", {"\"off\"", "\"jit\"", "1", "2", "\"3\""}},
        {"budget", {"\"50%\"", "\"100%\"", "\"1GiB\"", "\"2.01KB\"", "1024", "\"12.5%\""}},
        {"timeout", {"\"90s\"", "60", "\"1.5m\""}},
    };
    if (chance(rng, 0.1)) return any_value(rng);
    const auto names = valid.find(axis);
    if (names == valid.end()) {
        if (chance(rng, 0.5)) return int_list(list_length(rng));
        return std::to_string(1 + pick(rng, 8));
    }
    if (chance(rng, 0.5)) return pick(rng, names->second);
    std::string list = "[";
    const std::size_t n = 1 + pick(rng, 4);
    for (std::size_t i = 0; i < n; ++i) list += (i ? ", " : "") + pick(rng, names->second);
    return list + "]";
}

// A matrix written from scratch: custom models, defaults, sweeps and exclusions whose values
// are mostly of the right kind, some at or past their limits.
std::string generated_matrix(Rng& rng) {
    static const std::vector<std::string> shapes = {"1", "2", "3", "4", "8", "16", "32", "64", "96"};
    static const std::vector<std::string> edge_shapes = {"16384", "16385", "131072", "131073", "16777216",
                                                         "16777217", "2147483647", "0", "-4", "1.5"};
    static const std::vector<std::string> axes = {"model", "variant", "backend", "dtype", "batch", "seq",
                                                  "streams", "prefetch", "budget", "seed", "timeout", "iterations"};
    std::string out;
    if (chance(rng, 0.3)) out += "name = " + pick(rng, kValues) + "\n";
    const std::size_t models = pick(rng, 3);
    for (std::size_t i = 0; i < models; ++i) {
        out += "[[models]]\nname = \"m" + std::to_string(i) + "\"\n";
        if (chance(rng, 0.7)) out += "base = \"tiny\"\n";
        for (const char* key : {"layers", "hidden", "heads", "vocab", "positions"}) {
            if (chance(rng, 0.4)) {
                out += std::string(key) + " = " + pick(rng, chance(rng, 0.9) ? shapes : edge_shapes) + "\n";
            }
        }
        if (chance(rng, 0.2)) out += "ln_eps = " + pick(rng, kValues) + "\n";
    }
    if (chance(rng, 0.5)) out += "[defaults]\nseq = " + std::to_string(1 + pick(rng, 16)) + "\n";
    const std::size_t sweeps = 1 + pick(rng, 3);
    for (std::size_t i = 0; i < sweeps; ++i) {
        out += "[[sweep]]\n";
        const std::size_t keys = pick(rng, 4);
        for (std::size_t k = 0; k < keys; ++k) {
            const std::string& axis = pick(rng, axes);
            out += axis + " = " + value_for(rng, axis) + "\n";
        }
    }
    if (chance(rng, 0.4)) {
        const std::string& axis = pick(rng, axes);
        out += "[[exclude]]\n" + axis + " = " + value_for(rng, axis) + "\n";
    }
    return out;
}

// A matrix near the cell cap, under or over it: long lists in one sweep, or many sweeps, with
// exclusions (every cell is compared with every exclusion).
std::string large_matrix(Rng& rng) {
    std::string out;
    const std::size_t sweeps = chance(rng, 0.5) ? 1 : 20 + pick(rng, 40);
    const std::size_t per_axis = sweeps == 1 ? 150 + pick(rng, 300) : 20 + pick(rng, 40);
    for (std::size_t i = 0; i < sweeps; ++i) {
        out += "[[sweep]]\nbatch = " + int_list(per_axis) + "\nseed = " + int_list(per_axis) + "\n";
        if (chance(rng, 0.3)) out += "dtype = [\"fp32\", \"fp16\"]\n";
    }
    const std::size_t exclusions = pick(rng, 600);
    for (std::size_t i = 0; i < exclusions; ++i) {
        out += "[[exclude]]\nseed = " + std::to_string(i % per_axis + 1) + "\nbatch = " + std::to_string(i + 1) + "\n";
    }
    return out;
}

struct Case {
    std::string text;
    std::string how;
};

std::vector<Case> make_cases() {
    Rng rng(kSeed);
    const std::vector<std::string> seeds = seed_matrices();
    std::vector<Case> cases;
    for (int i = 0; i < kCases; ++i) {
        if (i % 150 == 1) {
            cases.push_back({large_matrix(rng), "large"});
            continue;
        }
        if (i % 5 == 0) {
            cases.push_back({generated_matrix(rng), "generated"});
            continue;
        }
        const std::size_t seed = pick(rng, seeds.size());
        std::string text = seeds[seed];
        const std::size_t mutations = 1 + pick(rng, 4);
        for (std::size_t m = 0; m < mutations; ++m) text = mutate(rng, text, seeds);
        cases.push_back({std::move(text), "seed " + std::to_string(seed) + ", " + std::to_string(mutations) + " mutations"});
    }
    return cases;
}

// ---- Checks ----

bool has_control_byte(std::string_view s) {
    return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// The matrix as a failure message shows it: its lines, with their control bytes escaped.
std::string shown(const std::string& text) {
    std::string out;
    for (const auto& line : split_lines(text)) out += "  | " + escape_controls(line) + "\n";
    return out;
}

std::string position(const std::string& path, const MatrixError& e) {
    return path + ":" + std::to_string(e.line()) + ":" + std::to_string(e.column()) + ": error: ";
}

// A safe file name: only [A-Za-z0-9._-], not hidden.
bool safe_file_name(std::string_view name) {
    const auto safe = [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    };
    return !name.empty() && name.front() != '.' && std::all_of(name.begin(), name.end(), safe);
}

// Parses one case in process, checking what it gives; returns the error it was refused with.
std::optional<MatrixError> parse_case(const Case& c, const std::string& path) {
    std::optional<MatrixError> refused;
    const double start = cpu_seconds();
    try {
        const Matrix m = parse_matrix(c.text, path);
        CHECK(!m.cells.empty());
        CHECK(m.cells.size() <= 100000);
        for (const auto& cell : m.cells) {
            // What `list` shows of every cell: never a negative or wrapped size.
            const std::int64_t weights = cell.weight_bytes();
            if (weights <= 0 || cell.budget_bytes() <= 0 || n_params(cell.model) <= 0) {
                FAIL_CHECK("cell " << cell.key() << " has weights " << weights << ", budget " << cell.budget_bytes());
            }
        }
        const std::string db = default_db_path(m);
        CHECK(db.rfind("results/", 0) == 0);
        CHECK(safe_file_name(db.substr(8)));
    } catch (const MatrixError& e) {
        CHECK(e.line() > 0);
        CHECK(e.column() > 0);
        CHECK_FALSE(has_control_byte(e.message()));
        CHECK_FALSE(has_control_byte(e.what()));
        CHECK(std::string(e.what()).rfind(position(path, e), 0) == 0);
        refused = e;
    } catch (const std::exception& e) {
        FAIL_CHECK("not a MatrixError: " << e.what());
    } catch (...) {
        FAIL_CHECK("threw something that is not an exception");
    }
    CHECK(cpu_seconds() - start < kMaxParseSeconds);
    return refused;
}

long peak_rss_kib() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss;
}

std::set<std::string> files_in(const std::string& dir) {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
    return names;
}

// Runs the binary with its stdout discarded, keeping what it writes to stderr.
test::CommandResult run_quietly(const std::string& args) {
    return test::run_command("( '" + test::sweetspot_binary() + "' " + args + " 2>&1 1>/dev/null )");
}

}  // namespace

TEST_CASE("fuzzed matrices are parsed or refused with a located, printable MatrixError", "[matrix][fuzz]") {
    const std::vector<Case> cases = make_cases();
    test::TempDir dir;
    int refused = 0;
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const std::string path = dir.file("case-" + std::to_string(i) + ".toml");
        INFO("case " << i << " (" << cases[i].how << "):\n" << shown(cases[i].text));
        if (parse_case(cases[i], path)) ++refused;
    }
    // Both sides are exercised: neither everything accepted nor everything refused.
    CHECK(refused > kCases / 4);
    CHECK(refused < kCases);
    CHECK(peak_rss_kib() < kMaxPeakRssKiB);
}

TEST_CASE("fuzzed matrices through the binary: list exits 0 or 2, a refused run changes no database", "[matrix][fuzz]") {
    const std::vector<Case> cases = make_cases();
    test::TempDir dir;
    const std::string reference_db = dir.file("reference.db");
    { Store::open(reference_db); }
    const std::string known_bytes = read_text(reference_db);
    fs::remove(reference_db);
    REQUIRE(!known_bytes.empty());

    int listed = 0, run = 0;
    for (std::size_t i = 0; i < cases.size() && (listed < kListCases || run < kRunCases); ++i) {
        const std::string path = dir.file("case-" + std::to_string(i) + ".toml");
        INFO("case " << i << " (" << cases[i].how << "):\n" << shown(cases[i].text));
        test::write_file(path, cases[i].text);
        const std::optional<MatrixError> refused = parse_case(cases[i], path);

        if (listed < kListCases && i % 3 == 0) {
            ++listed;
            const auto list = run_quietly("list '" + path + "'");
            INFO("sweetspot list: exit " << list.exit_code << "\n" << list.output);
            CHECK((list.exit_code == 0 || list.exit_code == 2));
            if (refused) {
                CHECK(list.exit_code == 2);
                CHECK_THAT(list.output, Catch::Matchers::ContainsSubstring(refused->what()));
            }
        }
        if (run < kRunCases && refused) {
            // Half the runs find a database there already, half none.
            const bool existing = ++run % 2 == 0;
            const std::string db = dir.file("case-" + std::to_string(i) + ".db");
            if (existing) test::write_file(db, known_bytes);
            const auto before = files_in(dir.file(""));
            const auto result = run_quietly("run '" + path + "' --db '" + db + "'");
            INFO("sweetspot run: exit " << result.exit_code << "\n" << result.output);
            CHECK(result.exit_code == 2);
            CHECK_THAT(result.output, Catch::Matchers::ContainsSubstring(refused->what()));
            CHECK(files_in(dir.file("")) == before);  // no database, journal or WAL file appeared
            if (existing) CHECK(read_text(db) == known_bytes);
            fs::remove(db);
        }
        fs::remove(path);
    }
    CHECK(listed == kListCases);
    CHECK(run == kRunCases);
}
