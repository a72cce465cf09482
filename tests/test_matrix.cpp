#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/checked_math.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/matrix/matrix.hpp"
#include "harness/matrix/shard.hpp"
#include "kernels/model/model_fields.hpp"
#include "kernels/model/weight_layout.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;
namespace fs = std::filesystem;

namespace {

const std::string kData = test::source_path("tests/data/matrix");

Matrix load_good(const std::string& file) { return load_matrix(kData + "/good/" + file); }

Matrix parse(const std::string& text) { return parse_matrix(text, "inline.toml"); }

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

// The message of the MatrixError that parsing `text` throws, or "" when it does not throw.
std::string error_of(const std::string& text) {
    try {
        parse(text);
    } catch (const MatrixError& e) {
        return e.message();
    }
    return "";
}

// "[first, first + 1, ...]" with `count` integers.
std::string int_list(int first, int count) {
    std::string list = "[";
    for (int i = first; i < first + count; ++i) list += std::to_string(i) + ", ";
    return list + "]";
}

// The key of the single cell a matrix with this [defaults] body defines.
std::string key_with_defaults(const std::string& defaults) {
    const Matrix m = parse("[defaults]\n" + defaults + "\n");
    REQUIRE(m.cells.size() == 1);
    return m.cells[0].key();
}

// A bad fixture's first line: "# expect: LINE:COL: <part of the message>".
struct Expectation {
    int line = 0;
    int column = 0;
    std::string message_part;
};

Expectation read_expectation(const fs::path& file) {
    std::ifstream in(file);
    std::string first;
    std::getline(in, first);
    Expectation e;
    int consumed = 0;
    if (std::sscanf(first.c_str(), "# expect: %d:%d: %n", &e.line, &e.column, &consumed) != 2 || consumed == 0) {
        FAIL(file.filename().string() << " does not start with '# expect: LINE:COL: message'");
    }
    e.message_part = first.substr(static_cast<std::size_t>(consumed));
    return e;
}

std::vector<fs::path> bad_fixtures() {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(kData + "/bad")) {
        if (entry.path().extension() == ".toml") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    return files;
}

}  // namespace

TEST_CASE("MatrixError reads file:line:col: error: message", "[matrix]") {
    const MatrixError e("m.toml", 3, 7, "'batch' must be an integer >= 1, got string \"two\"");
    CHECK(std::string(e.what()) == "m.toml:3:7: error: 'batch' must be an integer >= 1, got string \"two\"");
    CHECK(e.file() == "m.toml");
    CHECK(e.line() == 3);
    CHECK(e.column() == 7);
    CHECK(e.message() == "'batch' must be an integer >= 1, got string \"two\"");
    CHECK(std::string(MatrixError("m.toml", 0, 0, "gone").what()) == "m.toml: error: gone");
}

TEST_CASE("an unreadable matrix file is an error at line 0", "[matrix]") {
    const std::string path = kData + "/no_such_matrix.toml";
    try {
        load_matrix(path);
        FAIL("loading a missing file did not throw");
    } catch (const MatrixError& e) {
        CHECK(e.line() == 0);
        CHECK(e.message() == "cannot read matrix file: No such file or directory");
        CHECK(std::string(e.what()) == path + ": error: cannot read matrix file: No such file or directory");
    }
}

TEST_CASE("every malformed matrix fails where and how its first line says", "[matrix]") {
    const auto files = bad_fixtures();
    REQUIRE(files.size() >= 25);
    for (const auto& file : files) {
        const Expectation expected = read_expectation(file);
        INFO(file.filename().string());
        try {
            load_matrix(file.string());
            FAIL_CHECK("loaded without an error");
        } catch (const MatrixError& e) {
            INFO(e.what());
            CHECK(e.file() == file.string());
            CHECK(e.line() == expected.line);
            CHECK(e.column() == expected.column);
            CHECK_THAT(e.message(), ContainsSubstring(expected.message_part));
            CHECK(std::string(e.what()) == file.string() + ":" + std::to_string(e.line()) + ":" +
                                               std::to_string(e.column()) + ": error: " + e.message());
        }
    }
}

TEST_CASE("a matrix keeps its text, path, name and description", "[matrix]") {
    const std::string path = kData + "/good/cartesian.toml";
    const Matrix m = load_matrix(path);
    CHECK(m.path == path);
    CHECK(m.text == read_text(path));
    CHECK(m.hash() == fnv1a64_hex(m.text));
    CHECK(m.name == "cartesian");  // no top-level name: the file's stem
    CHECK(m.description == "cartesian expansion order");
    CHECK(load_good("precedence.toml").name == "precedence");
}

TEST_CASE("sweeps expand as a cartesian product, the first axis written varying slowest", "[matrix]") {
    const Matrix m = load_good("cartesian.toml");
    REQUIRE(m.cells.size() == 2 * 3 * 2);
    CHECK(m.excluded == 0);
    CHECK(m.duplicates == 0);
    std::vector<std::string> order;
    for (const auto& c : m.cells) {
        order.push_back(std::string(enum_name(c.dtype)) + " b" + std::to_string(c.batch) + " " + c.model.name);
    }
    const std::vector<std::string> expected = {
        "fp32 b1 tiny", "fp32 b1 tiny_odd", "fp32 b2 tiny", "fp32 b2 tiny_odd", "fp32 b4 tiny", "fp32 b4 tiny_odd",
        "fp16 b1 tiny", "fp16 b1 tiny_odd", "fp16 b2 tiny", "fp16 b2 tiny_odd", "fp16 b4 tiny", "fp16 b4 tiny_odd",
    };
    CHECK(order == expected);
    for (const auto& c : m.cells) CHECK(c.sweep == "sweep1");
}

TEST_CASE("built-in defaults are CellParams' defaults, with model tiny", "[matrix]") {
    const Matrix m = parse("");
    REQUIRE(m.cells.size() == 1);
    CellParams expected;
    expected.model = *find_builtin_model("tiny");
    expected.sweep = "defaults";
    CHECK(m.cells[0].canonical() == expected.canonical());
    CHECK(m.cells[0].timeout_s == expected.timeout_s);
    CHECK(m.cells[0].sweep == "defaults");
}

TEST_CASE("sweep values override [defaults], which override the built-in defaults", "[matrix]") {
    const Matrix m = load_good("precedence.toml");
    REQUIRE(m.cells.size() == 2);
    const CellParams& overridden = m.cells[0];
    const CellParams& inherited = m.cells[1];
    CHECK(overridden.sweep == "override");
    CHECK(overridden.batch == 8);
    CHECK(inherited.sweep == "inherit");
    CHECK(inherited.batch == 4);
    for (const auto& c : m.cells) {
        CHECK(c.backend == BackendId::uvm);
        CHECK(c.seq == 32);
        CHECK(c.budget == Budget{Budget::Kind::percent, 50});
        CHECK(c.timeout_s == 90);
        CHECK(c.model.name == "tiny");   // built-in default
        CHECK(c.dtype == DType::fp32);   // built-in default
        CHECK(c.iterations == 5);        // built-in default
    }
}

TEST_CASE("without [[sweep]], [defaults] alone define one cell", "[matrix]") {
    const Matrix m = load_good("defaults_only.toml");
    REQUIRE(m.cells.size() == 1);
    CHECK(m.cells[0].batch == 2);
    CHECK(m.cells[0].sweep == "defaults");
}

TEST_CASE("per-sweep and global exclusions remove cells and are counted", "[matrix]") {
    const Matrix m = load_good("exclusions.toml");
    CHECK(m.cells.size() == 10);
    CHECK(m.excluded == 6);
    CHECK(m.duplicates == 0);
    for (const auto& c : m.cells) {
        CHECK_FALSE((c.backend == BackendId::host && c.batch == 2));
        CHECK_FALSE((c.dtype == DType::fp16 && c.batch == 1));
        CHECK_FALSE((c.dtype == DType::bf16 && (c.variant.text() == "attn_ln" || c.variant.text() == "ffn_ln")));
    }
}

TEST_CASE("exclusions compare values in normal form, whatever their spelling", "[matrix]") {
    const Matrix m = parse(R"(
[[sweep]]
backend = "uvm-prefetch"
prefetch = ["2", 3]
budget = ["1KiB", "50%"]
timeout = "1m"

[[exclude]]
prefetch = 2
budget = 1024
timeout = 60
)");
    CHECK(m.excluded == 1);
    CHECK(m.cells.size() == 3);
}

TEST_CASE("cells produced twice are kept once and counted", "[matrix]") {
    const Matrix m = load_good("duplicates.toml");
    REQUIRE(m.cells.size() == 4);
    CHECK(m.duplicates == 2);
    CHECK(m.excluded == 0);
    CHECK(m.cells[1].sweep == "first");  // the first occurrence wins
    CHECK(m.cells[1].timeout_s == 600);
    CHECK(m.cells[3].sweep == "second");
    CHECK(m.cells[3].batch == 8);
}

TEST_CASE("custom models, with and without a base, reach CellParams::model", "[matrix]") {
    const Matrix m = load_good("custom_models.toml");
    REQUIRE(m.cells.size() == 3);
    const ModelConfig& wide = m.cells[0].model;
    ModelConfig expected_wide = *find_builtin_model("tiny");
    expected_wide.name = "wide_tiny";
    expected_wide.n_embd = 128;
    expected_wide.n_head = 8;
    CHECK(wide.name == expected_wide.name);
    CHECK(wide.n_layer == expected_wide.n_layer);
    CHECK(wide.n_embd == 128);
    CHECK(wide.n_head == 8);
    CHECK(wide.vocab_size == expected_wide.vocab_size);
    CHECK(wide.max_positions == expected_wide.max_positions);

    const ModelConfig& scratch = m.cells[1].model;
    CHECK(scratch.name == "scratch");
    CHECK(scratch.n_layer == 3);
    CHECK(scratch.n_embd == 48);
    CHECK(scratch.n_head == 6);
    CHECK(scratch.vocab_size == 50257);  // the default without a base
    CHECK(scratch.max_positions == 96);
    CHECK(scratch.ln_eps == 1e-6f);

    CHECK(m.cells[2].model.name == "tiny");
}

TEST_CASE("axis values in every accepted spelling reach the cell", "[matrix]") {
    const Matrix m = parse(R"(
[defaults]
backend = "uvm-prefetch"
prefetch = "jit"
budget = "12GiB"
timeout = "1.5m"
seed = 0
streams = 0

[[sweep]]
prefetch = [4, "off"]
)");
    REQUIRE(m.cells.size() == 2);
    CHECK(m.cells[0].prefetch == Prefetch{Prefetch::Kind::depth, 4});
    CHECK(m.cells[1].prefetch == Prefetch{});
    CHECK(m.cells[0].budget == Budget{Budget::Kind::bytes, 12.0 * 1024 * 1024 * 1024});
    CHECK(m.cells[0].timeout_s == 90);
    CHECK(m.cells[0].seed == 0);
    CHECK(m.cells[0].streams == 0);
}

TEST_CASE("sweeps are named sweep1, sweep2... unless they have a name", "[matrix]") {
    const Matrix m = parse("[[sweep]]\nbatch = 1\n[[sweep]]\nname = \"big\"\nbatch = 2\n[[sweep]]\nbatch = 3\n");
    REQUIRE(m.cells.size() == 3);
    CHECK(m.cells[0].sweep == "sweep1");
    CHECK(m.cells[1].sweep == "big");
    CHECK(m.cells[2].sweep == "sweep3");
}

TEST_CASE("the key of a fully specified cell is pinned", "[matrix]") {
    const Matrix m = load_good("pinned.toml");
    REQUIRE(m.cells.size() == 1);
    const CellParams& c = m.cells[0];
    // If this changes, results stored under the old keys no longer match their cells.
    CHECK(c.canonical() ==
          "activations=managed\n"
          "backend=uvm-prefetch\n"
          "batch=8\n"
          "budget=50%\n"
          "dtype=bf16\n"
          "mode=train\n"
          "model=pinned_model\n"
          "model.ln_eps=9.99999997e-07\n"
          "model.max_positions=256\n"
          "model.n_embd=96\n"
          "model.n_head=6\n"
          "model.n_layer=3\n"
          "model.vocab_size=1000\n"
          "prefetch=3\n"
          "seed=42\n"
          "seq=200\n"
          "streams=2\n"
          "trace_iterations=1\n"
          "variant=attn_ln\n"
          "weights=synthetic\n");
    CHECK(c.key() == "40dc828f4faa4b27");
}

TEST_CASE("keys differ when any keyed axis changes", "[matrix]") {
    // On uvm-prefetch, which uses every placement axis but launch (backend_registry.cpp).
    const std::string base = key_with_defaults("backend = \"uvm-prefetch\"");
    const std::vector<std::string> changes = {
        "model = \"tiny_odd\"",  "variant = \"all\"",      "backend = \"device\"",   "dtype = \"fp16\"",
        "batch = 2",             "seq = 32",               "streams = 2",            "prefetch = \"jit\"",
        "budget = \"50%\"",      "activations = \"managed\"", "mode = \"train\"",    "weights = \"w.safetensors\"",
        "trace_iterations = 1",  "seed = 2",              "debug_fault = \"abort\"",
    };
    std::vector<std::string> keys = {base};
    for (const auto& change : changes) {
        INFO(change);
        const std::string key = key_with_defaults(change.starts_with("backend") ? change : "backend = \"uvm-prefetch\"\n" + change);
        CHECK(std::find(keys.begin(), keys.end(), key) == keys.end());
        keys.push_back(key);
    }
}

TEST_CASE("keys are equal when only how long a cell is measured, or the sweep name, differs", "[matrix]") {
    const Matrix m = parse(R"(
[[sweep]]
name = "a"
timeout = "10m"

[[sweep]]
name = "b"
timeout = 30
iterations = 20
)");
    CHECK(m.cells.size() == 1);
    CHECK(m.duplicates == 1);
    for (const char* measured_longer : {"timeout = \"1h\"", "warmups = 0", "iterations = 6",
                                        "max_noise = 0.5", "max_iterations = 100", "max_time = \"30s\""}) {
        INFO(measured_longer);
        CHECK(key_with_defaults(measured_longer) == key_with_defaults(""));
    }
}

TEST_CASE("every cell's canonical text parses back to the same key", "[matrix]") {
    for (const auto& entry : fs::directory_iterator(kData + "/good")) {
        INFO(entry.path().filename().string());
        for (const auto& c : load_matrix(entry.path().string()).cells) {
            CHECK(CellParams::from_canonical(c.canonical()).key() == c.key());
        }
    }
}

TEST_CASE("unknown keys are reported in the order written", "[matrix]") {
    CHECK_THAT(error_of("[defaults]\nzeta = 1\nalpha = 2\n"), ContainsSubstring("unknown key 'zeta'"));
}

TEST_CASE("a sweep too large to be intended is refused", "[matrix]") {
    const std::string text = "[[sweep]]\nbatch = " + int_list(1, 400) + "\nseed = " + int_list(0, 400) + "\n";
    CHECK_THAT(error_of(text), ContainsSubstring("expands to 160000 cells"));
}

// ---- Hardening: found by fuzzing matrix files ----

namespace {

// The MatrixError parsing `text` throws; fails the test when it does not throw.
MatrixError matrix_error(const std::string& text) {
    try {
        parse(text);
    } catch (const MatrixError& e) {
        return e;
    }
    FAIL("parsed without an error:\n" << text);
    throw std::logic_error("FAIL returned");  // it throws; this only gives the function its return
}

bool has_control_byte(const std::string& s) {
    return std::any_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

// What keep_only throws (std::invalid_argument), or "" when it does not.
std::string keep_only_error(Matrix m, const std::vector<std::string>& filters) {
    try {
        keep_only(m, filters);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("the whole matrix is capped, not only each sweep, before any cell is made", "[matrix]") {
    // Three sweeps of 40 000 cells: each under the cap, together over it.
    std::string text;
    for (int i = 0; i < 3; ++i) text += "[[sweep]]\nbatch = " + int_list(1, 200) + "\nseed = " + int_list(0, 200) + "\n";
    const MatrixError e = matrix_error(text);
    CHECK(e.line() == 7);  // the sweep that takes the total over
    CHECK(e.column() == 1);
    CHECK_THAT(e.message(), ContainsSubstring("expand to 120000 cells") && ContainsSubstring("the 100000 a matrix may have"));

    // A product past 2^63 is counted without wrapping.
    std::string huge = "[[sweep]]\n";
    for (const char* axis : {"batch", "warmups", "iterations", "seed", "timeout", "trace_iterations", "streams",
                             "prefetch", "budget", "seq"}) {
        huge += std::string(axis) + " = " + int_list(1, 100) + "\n";
    }
    CHECK_THAT(matrix_error(huge).message(), ContainsSubstring("expands to more than 9223372036854775807 cells"));
}

TEST_CASE("custom model dimensions are bounded, at the value, naming the key and the limit", "[matrix]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"layers = 10000000", "'layers' = 10000000 is too large (at most 16384)"},
        {"layers = 2147483647", "'layers' = 2147483647 is too large (at most 16384)"},
        {"hidden = 2147483647", "'hidden' = 2147483647 is too large (at most 131072)"},
        {"heads = 131073", "'heads' = 131073 is too large (at most 131072)"},
        {"vocab = 16777217", "'vocab' = 16777217 is too large (at most 16777216)"},
        {"positions = 131073", "'positions' = 131073 is too large (at most 131072)"},
    };
    for (const auto& [assignment, expected] : cases) {
        INFO(assignment);
        const MatrixError e = matrix_error("[[models]]\nname = \"big\"\nbase = \"tiny\"\n" + assignment + "\n");
        CHECK(e.line() == 4);
        CHECK(e.column() == static_cast<int>(assignment.find('=')) + 3);
        CHECK(e.message() == expected);
    }
    // The shape that showed weights of "-94162856853504 B" and "runnable here: yes".
    CHECK(matrix_error("[[models]]\nname = \"wide\"\nlayers = 1000\nhidden = 2147483647\nheads = 1\n").message() ==
          "'hidden' = 2147483647 is too large (at most 131072)");
    // The largest shape allowed is accepted, and sized exactly.
    const Matrix m = parse("[[models]]\nname = \"largest\"\nlayers = 16384\nhidden = 131072\nheads = 1\n"
                           "vocab = 16777216\npositions = 131072\n[defaults]\nmodel = \"largest\"\n");
    REQUIRE(m.cells.size() == 1);
    CHECK(n_params(m.cells[0].model) == 3'382'142'864'457'728);
    CHECK(m.cells[0].weight_bytes() == 13'528'571'457'830'912);  // no padding: every size is a multiple of 128
}

TEST_CASE("integer axes are bounded where a huge value would overflow a size or a loop", "[matrix]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"batch = 2000000", "'batch' = 2000000 is too large (at most 1048576)"},
        {"seq = 2147483647", "'seq' = 2147483647 is too large (at most 131072)"},
        {"streams = 5000", "'streams' = 5000 is too large (at most 1024)"},
        {"iterations = 2147483647", "'iterations' = 2147483647 is too large (at most 1000000)"},
        {"warmups = 1000001", "'warmups' = 1000001 is too large (at most 1000000)"},
        {"trace_iterations = 1000001", "'trace_iterations' = 1000001 is too large (at most 1000000)"},
        {"prefetch = 2147483647", "a look-ahead depth from 1 to 16384"},
        {"budget = 9007199254740993", "from 1 byte to 9007199254740992 (8 PiB)"},
        {"budget = \"8193TiB\"", "from 1 byte to 9007199254740992 (8 PiB)"},
    };
    for (const auto& [assignment, expected] : cases) {
        INFO(assignment);
        const MatrixError e = matrix_error("[defaults]\n" + assignment + "\n");
        CHECK(e.line() == 2);
        CHECK_THAT(e.message(), ContainsSubstring(expected));
    }
    CHECK(parse("[defaults]\nbackend = \"uvm\"\nbudget = \"8192TiB\"\n").cells[0].budget_bytes() == 9'007'199'254'740'992);

    // batch × seq × vocab logits: a cell may run at most 2^20 tokens per forward.
    const MatrixError tokens = matrix_error("[defaults]\nmodel = \"gpt2_small\"\nseq = 1024\n[[sweep]]\nbatch = [1, 2048]\n");
    CHECK(tokens.line() == 5);
    CHECK(tokens.message() ==
          "'batch' = 2048 with 'seq' = 1024 is 2097152 tokens per forward, more than the 1048576 a cell may have");
    CHECK(parse("[defaults]\nmodel = \"gpt2_small\"\nseq = 1024\nbatch = 1024\n").cells.size() == 1);
}

TEST_CASE("size arithmetic is checked: a shape never gives a wrapped, negative size", "[matrix]") {
    const ModelConfig wide{"wide", 1000, 2147483647, 1, 50257, 1024, 1e-5f};
    CHECK_THROWS_AS(n_params(wide), std::overflow_error);
    CHECK_THAT(wide.validate(), ContainsSubstring("n_embd = 2147483647; at most 131072 is supported."));
    CellParams c;
    c.model = wide;
    CHECK_THROWS(c.weight_bytes());
    CHECK_THROWS(c.budget_bytes());

    for (const auto& builtin : builtin_models()) {  // sized without a unit per block, to the same total
        INFO(builtin.name);
        CHECK(WeightLayout::total_numel_of(builtin) == WeightLayout::for_model(builtin).total_numel);
    }

    CHECK(try_mul(std::int64_t{1} << 31, std::int64_t{1} << 31) == std::int64_t{1} << 62);
    CHECK_FALSE(try_mul(std::int64_t{1} << 32, std::int64_t{1} << 31));
    CHECK_FALSE(try_add(std::numeric_limits<std::int64_t>::max(), 1));
    CHECK_THROWS_WITH(checked_mul(std::numeric_limits<std::int64_t>::max(), 2, "the weights of model 'x'"),
                      ContainsSubstring("the weights of model 'x' overflows 64 bits"));
    CHECK(checked_add(40, 2, "answer") == 42);
}

TEST_CASE("the default database is a safe file name directly inside results/", "[matrix]") {
    const auto path_for = [](const std::string& name) {
        Matrix m;
        m.name = name;
        return default_db_path(m);
    };
    CHECK(path_for("demo") == "results/demo.db");
    CHECK(path_for("bench-13b_v1.2") == "results/bench-13b_v1.2.db");
    CHECK(path_for("../../escaped") == "results/_._.._escaped.db");
    CHECK(path_for("/tmp/abs") == "results/_tmp_abs.db");
    CHECK(path_for(std::string("x\0y", 3)) == "results/x_y.db");
    CHECK(path_for(".hidden") == "results/_hidden.db");
    CHECK(path_for("..") == "results/_..db");
    CHECK(path_for("") == "results/matrix.db");
    CHECK(path_for("gr\xc3\xbc\xc3\x9f" "e") == "results/gr____e.db");  // "grüße": each UTF-8 byte replaced
    CHECK(path_for(std::string(300, 'a')) == "results/" + std::string(100, 'a') + ".db");
    CHECK(default_db_path(parse("name = \"../../escaped\"\n")) == "results/_._.._escaped.db");
}

TEST_CASE("--only with a value no cell has is an error listing the values there are", "[matrix]") {
    const Matrix m = parse("[[sweep]]\nmodel = [\"tiny\", \"tiny_odd\"]\nbatch = [1, 2, 4]\n");
    CHECK(keep_only_error(m, {"batch=16"}) == "--only batch=16 matches no cell; batch in this matrix is 1, 2 or 4");
    CHECK(keep_only_error(m, {"model=nope"}) == "--only model=nope matches no cell; model in this matrix is tiny or tiny_odd");
    CHECK(keep_only_error(m, {"model=tiny", "batch=2,4", "batch=1"}) ==
          "--only batch=1 matches no cell; batch in the cells the --only filters before it keep is 2 or 4");
    CHECK_THAT(keep_only_error(m, {"batch=\x1b[2J"}), ContainsSubstring("--only batch=\\x1b[2J matches no cell"));

    Matrix partial = m;
    keep_only(partial, {"batch=2,16", "model=tiny,nope"});  // some values match: fine
    REQUIRE(partial.cells.size() == 1);
    CHECK(partial.cells[0].batch == 2);
    CHECK(partial.cells[0].model.name == "tiny");
}

TEST_CASE("messages escape the control bytes of keys, values and names", "[matrix]") {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"[defaults]\n\"ba\\u001btch\" = 1\n", "unknown key 'ba\\x1btch' in [defaults]"},
        {"[defaults]\n\"cut\\u0000here\" = 1\n", "unknown key 'cut\\0here' in [defaults]"},
        {"[defaults]\n\"two\\nlines\" = 1\n", "unknown key 'two\\nlines' in [defaults]"},
        {"[defaults]\nbackend = \"\\u001b[31mred\"\n", "got string \"\\x1b[31mred\", which has control characters"},
        {"[defaults]\nbatch = \"\\u007f\"\n", "got string \"\\x7f\""},
        {"name = \"x\\u0000y\"\n", "'name' must be a non-empty string on one line, got string \"x\\0y\""},
        {"[[models]]\nname = \"m\\u001b\"\nbase = \"tiny\"\n", "got string \"m\\x1b\", which has control characters"},
        {"[defaults]\nbatch = 1\x1b\n", ""},  // raw in the file: a TOML syntax error
        {"[defaults]\nbatch = \"1\x01\"\n", ""},
    };
    for (const auto& [text, expected] : cases) {
        INFO(text);
        const MatrixError e = matrix_error(text);
        CHECK_THAT(e.message(), ContainsSubstring(expected));
        CHECK_FALSE(has_control_byte(e.message()));
        CHECK_FALSE(has_control_byte(e.what()));
    }
    CHECK(escape_controls(std::string("a\0b\x1b\n\t\r\x7f\x1f~", 10)) == "a\\0b\\x1b\\n\\t\\r\\x7f\\x1f~");
}

TEST_CASE("ln_eps is refused where a float would lose it, and numbers print as written", "[matrix]") {
    const MatrixError tiny = matrix_error("[[models]]\nname = \"m\"\nbase = \"tiny\"\nln_eps = 1e-300\n");
    CHECK(tiny.line() == 4);
    CHECK(tiny.column() == 10);
    CHECK(tiny.message() == "'ln_eps' must be a number from 1e-12 to 1, got float 1e-300");
    CHECK_THAT(matrix_error("[[models]]\nname = \"m\"\nbase = \"tiny\"\nln_eps = 2.0\n").message(),
               ContainsSubstring("'ln_eps' must be a number from 1e-12 to 1"));
    CHECK(parse("[[models]]\nname = \"m\"\nbase = \"tiny\"\nln_eps = 1e-12\n[defaults]\nmodel = \"m\"\n").cells[0].model.ln_eps ==
          1e-12f);

    ModelConfig m = *find_builtin_model("tiny");
    m.ln_eps = 1e-30f;
    CHECK(m.validate() == "Model 'tiny' has ln_eps = 1e-30; it must be a number between 1e-12 and 1.");
}

TEST_CASE("a [[models]] entry's family: gpt2 leaves the cell's key alone, an unknown one is refused", "[matrix]") {
    const std::string model = "[[models]]\nname = \"m\"\nbase = \"tiny\"\n";
    const std::string use = "[defaults]\nmodel = \"m\"\n";
    const Matrix plain = parse(model + use);
    const Matrix named = parse(model + "family = \"gpt2\"\n" + use);
    REQUIRE(plain.cells.size() == 1);
    REQUIRE(named.cells.size() == 1);
    CHECK(named.cells[0].model.family == ModelFamily::gpt2);
    CHECK(named.cells[0].canonical() == plain.cells[0].canonical());
    CHECK(named.cells[0].key() == plain.cells[0].key());
    CHECK(CellParams::from_canonical(named.cells[0].canonical()).key() == named.cells[0].key());

    // The pinned cell with its family named: the key the test above pins, unchanged.
    std::string pinned = read_text(kData + "/good/pinned.toml");
    pinned.insert(pinned.find("ln_eps = 1e-6\n") + 14, "family = \"gpt2\"\n");
    const Matrix pinned_named = parse(pinned);
    REQUIRE(pinned_named.cells.size() == 1);
    CHECK(pinned_named.cells[0].key() == "40dc828f4faa4b27");

    // The family is a line of the cell text, as the shape is, written only where it is not gpt2
    // (gpt2 is the only family yet, so no cell text has the line): a text that states it reads as
    // one that does not, and a family that is none is refused.
    const Axis& family = *find_axis("model.family");
    CHECK(family.column == "family");
    CHECK(family.keyed == Axis::Keyed::unless_default);
    CHECK(family.default_text == "gpt2");
    CHECK_FALSE(family.in_matrix());
    const std::string text = plain.cells[0].canonical();
    CHECK(text.find("model.family") == std::string::npos);
    const CellParams stated = CellParams::from_canonical(text + "model.family=gpt2\n");
    CHECK(stated.model.family == ModelFamily::gpt2);
    CHECK(stated.canonical() == text);
    CHECK_THROWS_WITH(CellParams::from_canonical(text + "model.family=mamba\n"),
                      "cell text: 'model.family' must be one of: gpt2, llama, got 'mamba'");
    CHECK(family.choices == std::vector<std::string>{"gpt2", "llama"});

    // A LLaMA model's family, kv heads, MLP width and rotary settings are lines of its text and
    // come back from it, so the cell's process computes the model the matrix named.
    CellParams llama = plain.cells[0];
    llama.model = *find_builtin_model("tiny_llama_odd");
    const std::string llama_text = llama.canonical();
    for (const char* line : {"model.family=llama\n", "model.n_kv_head=1\n", "model.ffn_hidden=200\n",
                             "model.rope_theta=500000\n", "model.rope_scaling=8,1,4,32\n"})
        CHECK(llama_text.find(line) != std::string::npos);
    const CellParams back = CellParams::from_canonical(llama_text);
    CHECK(back.model.family == ModelFamily::llama);
    CHECK((back.model.n_kv_head == 1 && back.model.ffn_hidden == 200 && back.model.rope_theta == 500000.0));
    CHECK(back.model.rope_scaling == llama.model.rope_scaling);
    CHECK(back.key() == llama.key());
    CHECK(llama.key() != plain.cells[0].key());

    const MatrixError e = matrix_error(model + "family = \"mamba\"\n");
    CHECK(e.line() == 4);
    CHECK(e.column() == 10);
    CHECK(e.message() == "unknown family 'mamba'; expected one of: gpt2, llama");
    CHECK(matrix_error(model + "family = \"gtp2\"\n").message() ==
          "unknown family 'gtp2' (did you mean 'gpt2'?); expected one of: gpt2, llama");
    CHECK(matrix_error(model + "family = 2\n").message() == "'family' must be a string, got integer 2");
}

TEST_CASE("a [[models]] entry sets LLaMA's kv heads, MLP width and rotary positions, with or without a base",
          "[matrix]") {
    const Matrix own = parse(R"([[models]]
name = "small_llama"
family = "llama"
layers = 2
hidden = 64
heads = 8
kv_heads = 2
ffn = 96
vocab = 128
positions = 64
ln_eps = 1e-6
rope_theta = 500000.0
rope_scaling = { factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0, original_max_positions = 32 }

[[models]]
name = "short_llama_1b"
base = "llama_1b"
layers = 4
rope_scaling = "off"

[[sweep]]
model = ["small_llama", "short_llama_1b"]
)");
    REQUIRE(own.cells.size() == 2);
    const ModelConfig& m = own.cells[0].model;
    CHECK(m.family == ModelFamily::llama);
    CHECK((m.n_layer == 2 && m.n_embd == 64 && m.n_head == 8 && m.vocab_size == 128 && m.max_positions == 64));
    CHECK(m.n_kv_head == 2);
    CHECK(m.ffn_hidden == 96);
    CHECK(m.ln_eps == 1e-6f);
    CHECK(m.rope_theta == 500000.0);
    CHECK(m.rope_scaling == RopeScaling{.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                                        .original_max_positions = 32, .enabled = true});
    // llama_1b's fields but the layers and the scaling it turns off: 8 kv heads, width 8192, theta 500000.
    const ModelConfig& based = own.cells[1].model;
    CHECK(based.family == ModelFamily::llama);
    CHECK((based.n_layer == 4 && based.n_embd == 2048 && based.n_head == 32));
    CHECK(based.n_kv_head == 8);
    CHECK(based.ffn_hidden == 8192);
    CHECK(based.rope_theta == 500000.0);
    CHECK_FALSE(based.rope_scaling.enabled);

    // Each field is a line of the cell text, which a cell's process reads back to the same model.
    const std::string text = own.cells[0].canonical();
    for (const char* line : {"model.family=llama\n", "model.n_kv_head=2\n", "model.ffn_hidden=96\n",
                             "model.rope_theta=500000\n", "model.rope_scaling=8,1,4,32\n"})
        CHECK(text.find(line) != std::string::npos);
    CHECK(own.cells[1].canonical().find("model.rope_scaling") == std::string::npos);  // off: the default
    for (const CellParams& c : own.cells) {
        const CellParams back = CellParams::from_canonical(c.canonical());
        CHECK(back.key() == c.key());
        CHECK((back.model.n_kv_head == c.model.n_kv_head && back.model.ffn_hidden == c.model.ffn_hidden));
        CHECK(back.model.rope_scaling == c.model.rope_scaling);
    }
}

TEST_CASE("a [[models]] entry's LLaMA fields are refused where they are written, naming what they take", "[matrix]") {
    const std::string model = "[[models]]\nname = \"m\"\nbase = \"tiny_llama\"\n";
    const auto refused = [&](const std::string& line, int at_line, int at_column, const std::string& message) {
        INFO(line);
        const MatrixError e = matrix_error(model + line + "\n");
        CHECK(e.line() == at_line);
        CHECK(e.column() == at_column);
        CHECK(e.message() == message);
    };
    // tiny_llama has 4 heads: 3 kv heads do not divide them, a whole-model check placed at the entry.
    refused("kv_heads = 3", 1, 1,
            "custom model is not a usable shape: Model 'm' has n_kv_head = 3; it must divide n_head = 4 (0: as many as "
            "n_head).");
    refused("kv_heads = -1", 4, 12, "'kv_heads' must be an integer >= 0, got integer -1");
    refused("ffn = 524289", 4, 7, "'ffn' = 524289 is too large (at most 524288)");
    refused("rope_theta = -1.0", 4, 14, "'rope_theta' must be a positive number, got float -1.0");
    refused("rope_theta = 0", 4, 14, "'rope_theta' must be a positive number, got integer 0");
    refused("rope_theta = \"big\"", 4, 14, "'rope_theta' must be a positive number, got string \"big\"");
    refused("rope_scaling = \"on\"", 4, 16,
            "'rope_scaling' must be \"off\" or a table of factor, low_freq_factor, high_freq_factor, "
            "original_max_positions (Llama 3's scaling), got string \"on\"");
    refused("rope_scaling = { factor = 8.0 }", 4, 16,
            "'rope_scaling' needs 'low_freq_factor': give all of factor, low_freq_factor, high_freq_factor, "
            "original_max_positions");
    refused("rope_scaling = { factr = 8.0 }", 4, 18,
            "unknown key 'factr' in rope_scaling (did you mean 'factor'?); known keys: factor, low_freq_factor, "
            "high_freq_factor, original_max_positions");
    refused("rope_scaling = { factor = 0.0, low_freq_factor = 1, high_freq_factor = 4, original_max_positions = 64 }",
            4, 27, "'factor' must be a positive number, got float 0.0");
    refused("rope_scaling = { factor = 8, low_freq_factor = 1, high_freq_factor = 4, original_max_positions = 0.5 }",
            4, 98, "'original_max_positions' must be an integer >= 1, got float 0.5");
    // The scaling's bands must not cross: a whole-model check.
    refused("rope_scaling = { factor = 8, low_freq_factor = 4, high_freq_factor = 1, original_max_positions = 64 }",
            1, 1,
            "custom model is not a usable shape: Model 'm' has a rope scaling with factor 8, original_max_positions 64, "
            "low_freq_factor 4 and high_freq_factor 1; the factor and the positions must be positive and "
            "high_freq_factor above low_freq_factor.");
    // A GPT-2 model takes none of them: its block would not compute what its cells' keys say.
    for (const char* line : {"kv_heads = 2", "ffn = 128", "rope_theta = 500000.0",
                             "rope_scaling = { factor = 8, low_freq_factor = 1, high_freq_factor = 4, "
                             "original_max_positions = 64 }"}) {
        INFO(line);
        const MatrixError e = matrix_error("[[models]]\nname = \"m\"\nbase = \"tiny\"\n" + std::string(line) + "\n");
        CHECK(e.line() == 1);
        CHECK_THAT(e.message(), ContainsSubstring("custom model is not a usable shape: Model 'm' is of the gpt2 family and "
                                                  "sets "));
        CHECK_THAT(e.message(), ContainsSubstring(", a field of LLaMA's"));
    }
    CHECK(matrix_error("[[models]]\nname = \"m\"\nbase = \"tiny\"\nkv_heads = 2\n").message() ==
          "custom model is not a usable shape: Model 'm' is of the gpt2 family and sets n_kv_head, a field of LLaMA's: "
          "GPT-2's block has multi-head attention, an MLP 4 × n_embd wide and learned positions.");
    // rope_scaling = "off" is the default: accepted.
    CHECK(parse("[[models]]\nname = \"m\"\nbase = \"tiny\"\nrope_scaling = \"off\"\n[defaults]\nmodel = \"m\"\n")
              .cells[0]
              .key() == parse("[[models]]\nname = \"m\"\nbase = \"tiny\"\n[defaults]\nmodel = \"m\"\n").cells[0].key());
    CHECK(matrix_error(model + "kv_head = 2\n").message() ==
          "unknown key 'kv_head' in [[models]] (did you mean 'kv_heads'?); known keys: name, base, layers, hidden, heads, "
          "vocab, positions, ln_eps, family, kv_heads, ffn, rope_theta, rope_scaling");
}

TEST_CASE("the fields of a model whose 0 stands for another count hold the count in effect", "[matrix]") {
    const ModelField& kv = model_field_of(&ModelConfig::n_kv_head);
    const ModelField& ffn = model_field_of(&ModelConfig::ffn_hidden);
    const auto in_effect = [&](const char* model) {
        const ModelConfig m = *find_builtin_model(model);
        return std::pair{*model_field_in_effect(kv, m), *model_field_in_effect(ffn, m)};
    };
    CHECK(in_effect("gpt2_small") == std::pair{12, 3072});  // 0 and 0 in its text: 12 heads, 4 × 768
    CHECK(in_effect("tiny") == std::pair{4, 256});
    CHECK(in_effect("llama2_7b") == std::pair{32, 11008});
    CHECK(in_effect("llama_1b") == std::pair{8, 8192});
    CHECK_FALSE(model_field_in_effect(model_field_of(&ModelConfig::n_head), *find_builtin_model("tiny")));
    for (const ModelConfig& m : builtin_models()) {
        INFO(m.name);
        CHECK(*model_field_in_effect(kv, m) == m.kv_heads());
        CHECK(*model_field_in_effect(ffn, m) == m.ffn_width());
    }
}

TEST_CASE("sizes in decimal and binary units are exact byte counts", "[matrix]") {
    const std::vector<std::pair<std::string, std::int64_t>> sizes = {
        {"512MB", 512'000'000},      {"12GB", 12'000'000'000},          {"512MiB", 536'870'912},
        {"12GiB", 12'884'901'888},   {"1.5GB", 1'500'000'000},          {"100KB", 100'000},
        {"100KiB", 102'400},         {"2.01KB", 2'010},                 {"4.35GB", 4'350'000'000},
        {"1TB", 1'000'000'000'000},  {"1TiB", 1'099'511'627'776},       {"1.5 GiB", 1'610'612'736},
        {"0.1KiB", 102},             {"12884901888", 12'884'901'888},   {"7B", 7},
    };
    for (const auto& [text, bytes] : sizes) {
        INFO(text);
        const auto b = Budget::parse(text);
        REQUIRE(b);
        CHECK(b->kind == Budget::Kind::bytes);
        CHECK(b->resolve(1) == bytes);
    }
    CHECK_FALSE(Budget::parse("0.5B"));  // less than a byte

    const auto half = Budget::parse("50%");
    REQUIRE(half);
    CHECK(half->resolve(1'000'001) == 500'000);
    CHECK(half->resolve(18'014'398'509'481'986) == 9'007'199'254'740'993);  // 2^54 + 2: past a double's integers
    CHECK(Budget::parse("12.5%")->resolve(1'000) == 125);
    CHECK(Budget::parse("100%")->resolve(9'223'372'036'854'775'807) == 9'223'372'036'854'775'807);

    // Through a matrix: model tiny in fp32 lays out 174 848 elements (tensors padded to 128).
    const Matrix m = parse("[[sweep]]\nbackend = \"explicit-copy\"\nbudget = [\"50%\", \"512MB\", \"100KiB\"]\n");
    REQUIRE(m.cells.size() == 3);
    CHECK(m.cells[0].weight_bytes() == 699'392);
    CHECK(m.cells[0].budget_bytes() == 349'696);
    CHECK(m.cells[1].budget_bytes() == 512'000'000);
    CHECK(m.cells[2].budget_bytes() == 102'400);
}

TEST_CASE("--shard i/N: every cell in exactly one shard, the same split every time, balanced by cost", "[matrix][shard]") {
    CHECK(parse_shard("2/8").index == 2);
    CHECK(parse_shard("2/8").count == 8);
    CHECK(parse_shard("1/1").count == 1);
    for (const char* bad : {"0/3", "4/3", "3", "a/b", "1/", "/2", "-1/2", "1/2/3", "1 /2"})
        CHECK_THROWS_WITH(parse_shard(bad), ContainsSubstring("--shard expects i/N"));

    // Three model sizes, five of each, at two batch sizes: unequal costs.
    const Matrix m = parse_matrix("name = \"s\"\n[defaults]\nbackend = \"host\"\n[[sweep]]\nname = \"a\"\n"
                                  "model = [\"tiny\", \"tiny_odd\", \"gpt2_small\"]\nseed = [1, 2, 3, 4, 5]\n"
                                  "batch = [1, 4]\n",
                                  "test");
    REQUIRE(m.cells.size() == 30);
    for (const int n : {1, 2, 3, 7, 40}) {
        INFO(n << " shards");
        std::vector<int> owner(m.cells.size(), 0);
        double most = 0, least = 1e300, largest_cell = 0;
        for (int i = 1; i <= n; ++i) {
            const auto mine = shard_positions(m.cells, {i, n});
            CHECK(mine == shard_positions(m.cells, {i, n}));  // deterministic
            CHECK(std::is_sorted(mine.begin(), mine.end()));
            double load = 0;
            for (const std::size_t p : mine) {
                ++owner[p];
                load += shard_cost(m.cells[p]);
                largest_cell = std::max(largest_cell, shard_cost(m.cells[p]));
            }
            most = std::max(most, load);
            least = std::min(least, load);
        }
        CHECK(std::all_of(owner.begin(), owner.end(), [](int o) { return o == 1; }));
        // Most expensive first, each to the lightest shard: no shard ends more than one cell's
        // cost above another.
        CHECK(most - least <= largest_cell);
    }
}

TEST_CASE("--shard i/N: the most expensive cells first, each to the lightest shard, warm-ups counted", "[matrix][shard]") {
    // A cell of the tiny model in fp32 (699 392 bytes of weights) with these forwards.
    const auto cell = [](int warmups, int iterations, int traced) {
        CellParams c;
        c.warmups = warmups;
        c.iterations = iterations;
        c.trace_iterations = traced;
        return c;
    };
    // Weight bytes times the forwards: warm-ups, timed and traced iterations, and one for placing
    // the weights and the check. Two cells equal but for their warm-ups cost 4 and 8 units.
    CHECK(shard_cost(cell(0, 3, 0)) == 699'392.0 * 4);
    CHECK(shard_cost(cell(4, 3, 0)) == 699'392.0 * 8);
    CHECK(shard_cost(cell(0, 3, 2)) == 699'392.0 * 6);

    // Cells 0 to 4 of 3, 8, 5, 4 and 6 units into 2 shards, by hand:
    //   8 (cell 1) to shard 1 (both empty: the first)   loads  8,  0
    //   6 (cell 4) to shard 2                                  8,  6
    //   5 (cell 2) to shard 2                                  8, 11
    //   4 (cell 3) to shard 1                                 12, 11
    //   3 (cell 0) to shard 2                                 12, 14
    // The cheapest first would give shard 1 cells 0, 1, 2; matrix order 0, 2, 3; costs without the
    // warm-ups (3, 4, 4, 4, 6) 3 and 4; without the traced iterations (3, 8, 5, 4, 4) 1 and 4.
    const std::vector<CellParams> cells = {cell(0, 2, 0), cell(4, 3, 0), cell(1, 3, 0), cell(0, 3, 0), cell(0, 3, 2)};
    CHECK(shard_positions(cells, {1, 2}) == std::vector<std::size_t>{1, 3});
    CHECK(shard_positions(cells, {2, 2}) == std::vector<std::size_t>{0, 2, 4});
    // 3 shards: 8 to 1; 6 to 2; 5 to 3; 4 to 3 (loads 8, 6, 5), making 9; 3 to 2 (8, 6, 9).
    CHECK(shard_positions(cells, {1, 3}) == std::vector<std::size_t>{1});
    CHECK(shard_positions(cells, {2, 3}) == std::vector<std::size_t>{0, 4});
    CHECK(shard_positions(cells, {3, 3}) == std::vector<std::size_t>{2, 3});
}

TEST_CASE("--set gives an axis its values in every sweep, in place of the matrix's", "[matrix][set]") {
    const std::string text =
        "name = \"s\"\n[defaults]\nmodel = \"tiny\"\nbatch = 2\n"
        "[[sweep]]\nname = \"a\"\nseq = [16, 32]\n"
        "[[sweep]]\nname = \"b\"\nbatch = [4, 8]\nseq = 64\n"
        "[[exclude]]\nbatch = 8\nseq = 64\n";
    const Matrix plain = parse_matrix(text, "m.toml");
    REQUIRE(plain.cells.size() == 3);  // a: batch 2 × seq 16, 32; b: batch 4 (8 excluded)

    const Matrix set = parse_matrix(text, "m.toml", {"batch=1,3", "dtype=bf16"});
    REQUIRE(set.cells.size() == 6);  // a: 2 seqs × 2 batches; b: 2 batches; the exclusion matches nothing now
    for (const CellParams& c : set.cells) {
        CHECK((c.batch == 1 || c.batch == 3));
        CHECK(c.dtype == DType::bf16);
    }
    CHECK(set.cells.front().sweep == "a");
    CHECK(set.cells.back().sweep == "b");
    CHECK(set.cells.back().seq == 64);
    CHECK(set.overrides == std::vector<std::string>{"batch=1,3", "dtype=bf16"});
    // A value is read as the matrix's own would be: the same cell, the same key.
    const Matrix written = parse_matrix(
        "name = \"s\"\n[defaults]\nmodel = \"tiny\"\ndtype = \"bf16\"\n[[sweep]]\nname = \"a\"\nbatch = [1, 3]\nseq = [16, 32]\n",
        "m.toml");
    CHECK(written.cells.front().key() == set.cells.front().key());
    // Strings, sizes and models as on the command line, without TOML quotes.
    const Matrix budget = parse_matrix(text, "m.toml", {"backend=uvm-prefetch", "budget=50%", "model=gpt2_small"});
    CHECK(budget.cells.front().backend == BackendId::uvm_prefetch);
    CHECK(budget.cells.front().budget.text() == "50%");
    CHECK(budget.cells.front().model.name == "gpt2_small");

    CHECK_THROWS_WITH(parse_matrix(text, "m.toml", {"bach=1"}), ContainsSubstring("(did you mean 'batch'?)"));
    CHECK_THROWS_WITH(parse_matrix(text, "m.toml", {"batch=0"}), ContainsSubstring("--set batch=0: 'batch' must be"));
    CHECK_THROWS_WITH(parse_matrix(text, "m.toml", {"model=gpt5"}), ContainsSubstring("--set model=gpt5"));
    CHECK_THROWS_WITH(parse_matrix(text, "m.toml", {"batch="}), ContainsSubstring("--set expects AXIS=VALUE"));
}

TEST_CASE("a placement axis a backend does not use takes its default there, said once per sweep", "[matrix]") {
    // device uses neither streams nor prefetch (backend_registry.cpp): its cells of the two stream
    // counts measure one workload, kept once.
    const Matrix m = parse(R"(
[[sweep]]
name = "mixed"
backend = ["device", "explicit-copy"]
streams = [1, 2]
prefetch = 2
)");
    REQUIRE(m.cells.size() == 3);
    CHECK(m.duplicates == 1);
    CHECK(m.cells[0].backend == BackendId::device);
    CHECK(m.cells[0].streams == 1);
    CHECK(m.cells[0].prefetch == Prefetch{});
    CHECK(m.cells[1].streams == 1);
    CHECK(m.cells[2].streams == 2);
    CHECK(m.cells[2].prefetch == Prefetch{Prefetch::Kind::depth, 2});
    REQUIRE(m.notes.size() == 2);
    CHECK(m.notes[0] == "sweep 'mixed': prefetch has no effect on backend device, whose cells take the default (off)");
    CHECK(m.notes[1] == "sweep 'mixed': streams has no effect on backend device, whose cells take the default (1)");

    // Inherited from [defaults], the value is dropped where a sweep's backends do not use it.
    const Matrix inherited = parse("[defaults]\nevict = \"read-mostly\"\n[[sweep]]\nbackend = \"explicit-copy\"\n"
                                   "[[sweep]]\nbackend = \"uvm\"\n");
    REQUIRE(inherited.cells.size() == 2);
    CHECK(inherited.cells[0].evict == UvmEvict::migrate);
    CHECK(inherited.cells[1].evict == UvmEvict::read_mostly);
    CHECK(inherited.notes.size() == 1);
}

TEST_CASE("a sweep that sets a placement axis none of its backends uses is refused where it says so", "[matrix]") {
    const MatrixError e = matrix_error("[[sweep]]\nbackend = \"device\"\nevict = [\"migrate\", \"read-mostly\"]\n");
    CHECK(e.line() == 3);
    CHECK(e.column() == 21);
    CHECK(e.message() ==
          "'evict' = read-mostly has no effect on the backend of sweep 'sweep1' (device): remove it, or give the sweep a "
          "backend that uses it (uvm, uvm-prefetch)");
    // The default written out is harmless, and so is --set, which gives every sweep the same values.
    CHECK(parse("[[sweep]]\nbackend = \"device\"\nevict = \"migrate\"\n").cells.size() == 1);
    CHECK(parse_matrix("[[sweep]]\nbackend = \"device\"\n", "inline.toml", {"evict=read-mostly"}).cells.size() == 1);
}

TEST_CASE("a variant is the union of the fusions and presets it joins, each fusion named once", "[matrix][variant]") {
    const auto variant_of = [](const std::string& text) {
        return parse("[defaults]\nvariant = \"" + text + "\"\n").cells.at(0).variant;
    };
    const Variant tempo{Fusion::inplace_ln, Fusion::inplace_gelu};
    CHECK(variant_of("tempo") == tempo);
    CHECK(variant_of("inplace_gelu+inplace_ln") == tempo);
    CHECK(variant_of("inplace_gelu+inplace_ln").text() == "tempo");  // a preset's set takes its name
    const Variant fast_tempo{Fusion::flash_attention, Fusion::mlp_epilogue, Fusion::proj_epilogue, Fusion::inplace_ln,
                             Fusion::inplace_gelu};
    CHECK(variant_of("flash_attention+tempo+mlp_epilogue+proj_epilogue") == fast_tempo);
    // Not a preset: the fusions in the order Fusion declares them.
    CHECK(fast_tempo.text() == "mlp_epilogue+flash_attention+proj_epilogue+inplace_ln+inplace_gelu");
    CHECK(variant_of("attn_proj+tempo") == Variant{Fusion::flash_attention, Fusion::proj_epilogue, Fusion::inplace_ln,
                                                   Fusion::inplace_gelu});
    // A fusion twice, directly or through a preset; baseline inside a sum; an empty part.
    for (const char* bad : {"tempo+inplace_gelu", "inplace_ln+inplace_ln", "attn_proj+flash_attention",
                            "baseline+flash_attention", "flash_attention+baseline", "tempo+", "+tempo", "tempo++softmax"}) {
        INFO(bad);
        CHECK_THROWS_WITH(variant_of(bad), ContainsSubstring("fusions and presets joined by '+', each fusion once"));
    }
    CHECK(variant_of("baseline").is_baseline());
}
