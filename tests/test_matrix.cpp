#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness/matrix.hpp"
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
        order.push_back(std::string(dtype_name(c.dtype)) + " b" + std::to_string(c.batch) + " " + c.model.name);
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
        CHECK(c.backend == "uvm");
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
        CHECK_FALSE((c.backend == "host" && c.batch == 2));
        CHECK_FALSE((c.dtype == DType::fp16 && c.batch == 1));
        CHECK_FALSE((c.dtype == DType::bf16 && (c.variant == "attn_ln" || c.variant == "ffn_ln")));
    }
}

TEST_CASE("exclusions compare values in normal form, whatever their spelling", "[matrix]") {
    const Matrix m = parse(R"(
[[sweep]]
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
          "iterations=7\n"
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
          "warmups=2\n"
          "weights=synthetic\n");
    CHECK(c.key() == "65eb04d17a1a8901");
}

TEST_CASE("keys differ when any keyed axis changes", "[matrix]") {
    const std::string base = key_with_defaults("");
    const std::vector<std::string> changes = {
        "model = \"tiny_odd\"",  "variant = \"all\"",      "backend = \"device\"",   "dtype = \"fp16\"",
        "batch = 2",             "seq = 32",               "streams = 2",            "prefetch = \"jit\"",
        "budget = \"50%\"",      "activations = \"managed\"", "mode = \"train\"",    "weights = \"w.safetensors\"",
        "warmups = 0",           "iterations = 6",         "trace_iterations = 1",   "seed = 2",
        "debug_fault = \"abort\"",
    };
    std::vector<std::string> keys = {base};
    for (const auto& change : changes) {
        INFO(change);
        const std::string key = key_with_defaults(change);
        CHECK(std::find(keys.begin(), keys.end(), key) == keys.end());
        keys.push_back(key);
    }
}

TEST_CASE("keys are equal when only the timeout or the sweep name differs", "[matrix]") {
    const Matrix m = parse(R"(
[[sweep]]
name = "a"
timeout = "10m"

[[sweep]]
name = "b"
timeout = 30
)");
    CHECK(m.cells.size() == 1);
    CHECK(m.duplicates == 1);
    CHECK(key_with_defaults("timeout = \"1h\"") == key_with_defaults(""));
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
