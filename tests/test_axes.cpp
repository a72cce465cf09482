// The axis registry: each axis declared once, and everything derived from it (canonical text,
// --only, the cells columns, list, summary, analysis/, the docs) agrees with it.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "backends/backend_registry.hpp"
#include "harness/cli/cell_list.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/matrix/matrix.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/store/store.hpp"
#include "kernels/model/model_fields.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;

namespace {

std::string read_text(const std::string& path) {
    std::ifstream f(path);
    REQUIRE(f);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

// A value of `axis` other than its default, in normal form.
std::string other_value(const Axis& axis) {
    switch (axis.written) {
        case Axis::Written::choice:
            for (const auto& c : axis.choices)
                if (c != axis.default_text) return c;
            break;
        case Axis::Written::integer: {
            const auto v = *parse_integer(axis.default_text);
            return std::to_string(v < axis.max ? v + 1 : v - 1);
        }
        case Axis::Written::boolean: return axis.default_text == "true" ? "false" : "true";
        case Axis::Written::model: return "tiny_odd";
        default:
            for (const char* candidate : {"jit", "50%", "0.5", "60", "other.safetensors", "uniform:1-8"}) {
                const auto v = axis.normalize(candidate);
                if (v && *v != axis.default_text) return *v;
            }
    }
    FAIL("no second value for axis " << axis.name);
    return {};
}

CellParams with_value(const Axis& axis, const std::string& value) {
    CellParams c;
    axis.set(c, value);
    if (axis.written == Axis::Written::model) c.model = find_builtin_model(value).value();
    return c;
}

// The printed row of each cell, without its index and key (which always differ).
std::vector<std::string> list_rows(const std::vector<CellParams>& cells) {
    std::ostringstream out;
    print_cell_list(cells, std::nullopt, TableFormat::text, out);
    std::istringstream lines(out.str());
    std::vector<std::string> rows;
    std::string line;
    std::getline(lines, line);  // header
    std::getline(lines, line);  // rule
    for (std::size_t i = 0; i < cells.size() && std::getline(lines, line); ++i) {
        rows.push_back(std::regex_replace(line, std::regex("^ *[0-9]+ +[0-9a-f]{16}"), ""));
    }
    return rows;
}

}  // namespace

TEST_CASE("every axis is declared once, with a default its own parser accepts", "[axes]") {
    std::set<std::string_view> names;
    for (const Axis& axis : axes()) {
        INFO(axis.name);
        CHECK(names.insert(axis.name).second);
        REQUIRE(axis.normalize);
        REQUIRE(axis.get);
        REQUIRE(axis.set);
        CHECK(axis.normalize(axis.default_text) == axis.default_text);
        CHECK_FALSE(axis.expects.empty());
        CHECK(find_axis(axis.name) == &axis);
        if (axis.in_matrix()) {
            // Setting a value and reading it back gives the value: get and set agree.
            const std::string other = other_value(axis);
            CHECK(axis.get(with_value(axis, other)) == other);
        }
    }
}

TEST_CASE("every enumerated axis accepts exactly its enumeration's names", "[axes]") {
    CHECK(find_axis("backend")->choices == enum_names<BackendId>());
    CHECK(find_axis("dtype")->choices == enum_names<DType>());
    CHECK(find_axis("resident")->choices == enum_names<ResidentPolicy>());
    CHECK(find_axis("evict")->choices == enum_names<UvmEvict>());
    CHECK(find_axis("activations")->choices == enum_names<Activations>());
    CHECK(find_axis("mode")->choices == enum_names<Mode>());
    CHECK(find_axis("debug_fault")->choices == enum_names<DebugFault>());
    for (const BackendId b : {BackendId::device, BackendId::explicit_copy, BackendId::uvm, BackendId::uvm_prefetch,
                              BackendId::host}) {
        CHECK(backend_traits(b).id == b);
        CHECK(parse_enum<BackendId>(enum_name(b)) == b);
    }
    CHECK_FALSE(parse_enum<BackendId>("nvlink-magic"));
}

TEST_CASE("a cell's text round-trips through its parser for a non-default value of every axis", "[axes]") {
    for (const Axis& axis : axes()) {
        if (!axis.in_matrix() || axis.keyed == Axis::Keyed::no) continue;
        INFO(axis.name);
        const CellParams c = with_value(axis, other_value(axis));
        const CellParams back = CellParams::from_canonical(c.canonical());
        CHECK(back.canonical() == c.canonical());
        CHECK(back.key() != CellParams{}.key());
        CHECK_THAT(c.canonical(), ContainsSubstring(std::string(axis.name) + "="));
    }
    CHECK_THROWS_WITH(CellParams::from_canonical(CellParams{}.canonical() + "backend=nvlink\n"),
                      ContainsSubstring("'backend' must be one of: device, explicit-copy, uvm, uvm-prefetch, host"));
}

TEST_CASE("list prints a column for every axis in which two cells differ", "[axes]") {
    for (const Axis& axis : axes()) {
        if (!axis.in_matrix() || axis.in_list == Axis::Shown::never) continue;
        INFO(axis.name);
        const std::vector<CellParams> cells = {CellParams{}, with_value(axis, other_value(axis))};
        const auto rows = list_rows(cells);
        REQUIRE(rows.size() == 2);
        CHECK(rows[0] != rows[1]);
    }
    // Every axis a matrix sets can tell two cells apart, so none may be hidden from list.
    for (const Axis& axis : axes())
        if (axis.in_matrix()) CHECK(axis.in_list != Axis::Shown::never);
}

TEST_CASE("list tells apart every two cells of the shipped matrices, and names each model's shape", "[axes]") {
    for (const auto& entry : std::filesystem::directory_iterator(test::source_path("experiments"))) {
        if (entry.path().extension() != ".toml") continue;
        INFO(entry.path());
        const Matrix m = load_matrix(entry.path().string());
        const auto rows = list_rows(m.cells);
        CHECK(std::set<std::string>(rows.begin(), rows.end()).size() == m.cells.size());
    }
    const Matrix bench = load_matrix(test::source_path("experiments/bench-backends.toml"));
    std::ostringstream out;
    print_cell_list(bench.cells, std::nullopt, TableFormat::text, out);
    CHECK_THAT(out.str(), ContainsSubstring("resident"));
    CHECK_THAT(out.str(), ContainsSubstring("evict"));
    CHECK_THAT(out.str(), ContainsSubstring("gpt2_1.5b: 48 layers, hidden 1600, 25 heads"));

    const Matrix custom = parse_matrix(R"(
[[models]]
name = "narrow"
base = "gpt2_small"
hidden = 384
heads = 6

[defaults]
model = "narrow"
)",
                                       "custom.toml");
    std::ostringstream custom_out;
    print_cell_list(custom.cells, std::nullopt, TableFormat::text, custom_out);
    CHECK_THAT(custom_out.str(), ContainsSubstring("narrow: 12 layers, hidden 384, 6 heads"));
    CHECK_THAT(custom_out.str(), ContainsSubstring("ln_eps 1e-05, gpt2 family, "));
    CHECK_THAT(custom_out.str(), ContainsSubstring("(the matrix's [[models]])"));
    // A GPT-2 model's line names no field it leaves at its default.
    CHECK_THAT(custom_out.str(), !ContainsSubstring("kv heads") && !ContainsSubstring("rope"));

    // LLaMA's fields, where a model sets them: llama2_7b keeps the default rotary base and no scaling.
    const Matrix llama = parse_matrix("[[sweep]]\nmodel = [\"llama_1b\", \"llama2_7b\"]\n", "llama.toml");
    std::ostringstream llama_out;
    print_cell_list(llama.cells, std::nullopt, TableFormat::text, llama_out);
    CHECK_THAT(llama_out.str(),
               ContainsSubstring("llama_1b: 16 layers, hidden 2048, 32 heads, vocab 128256, 131072 positions, ln_eps 1e-05, "
                                 "llama family, 8 kv heads, ffn 8192, rope_theta 500000, rope_scaling (factor 32, "
                                 "low_freq_factor 1, high_freq_factor 4, original_max_positions 8192), "));
    CHECK_THAT(llama_out.str(), ContainsSubstring("llama2_7b: 32 layers, hidden 4096, 32 heads, vocab 32000, 4096 positions, "
                                                  "ln_eps 1e-05, llama family, 32 kv heads, ffn 11008, 25.1 GiB of fp32 "
                                                  "parameters (built in)"));
}

TEST_CASE("analysis/ describes the files older than the axes table as the registry does", "[axes]") {
    // analysis/axes.py's OLDER_AXES: (column, role, set in a matrix, value before its column), for the
    // files of schema 10 and older, which do not describe their own columns.
    const std::string py = read_text(test::source_path("analysis/axes.py"));
    const std::regex entry(R"re(\("([a-z_0-9]+)", "([a-z]+)", (True|False), ([^)]*)\))re");
    std::map<std::string, std::tuple<std::string, bool, std::string>> older;
    for (auto it = std::sregex_iterator(py.begin(), py.end(), entry); it != std::sregex_iterator(); ++it)
        older[(*it)[1]] = {(*it)[2], (*it)[3] == "True", (*it)[4]};
    constexpr int kLastUndescribed = 10;
    std::set<std::string> expected;
    for (const Axis& axis : axes()) {
        if (!axis.has_column() || axis.since > kLastUndescribed) continue;
        const std::string column(axis.column);
        expected.insert(column);
        INFO(column);
        REQUIRE(older.count(column));
        const auto& [role, in_matrix, before] = older.at(column);
        CHECK(role == std::string(enum_name(axis.role)));
        CHECK(in_matrix == axis.in_matrix());
        if (axis.since > kOldestReadableSchemaVersion) {
            const std::string value = before.front() == '"' ? before.substr(1, before.size() - 2) : before;
            CHECK(parse_finite_number(value).value_or(0) == parse_finite_number(axis.value_before()).value_or(0));
            if (!parse_finite_number(value)) CHECK(value == axis.value_before());
        } else {
            CHECK(before == "None");
        }
    }
    std::set<std::string> listed;
    for (const auto& [column, described] : older) listed.insert(column);
    CHECK(listed == expected);
}

TEST_CASE("the matrix format documents every axis a matrix may set", "[axes]") {
    const std::string doc = read_text(test::source_path("experiments/README.md"));
    for (const std::string& name : matrix_axis_names()) {
        INFO(name);
        CHECK_THAT(doc, ContainsSubstring("| `" + name + "` |"));
    }
}

TEST_CASE("the matrix format documents every key of a [[models]] entry", "[axes]") {
    const std::string doc = read_text(test::source_path("experiments/README.md"));
    const auto from = doc.find("## Custom models");
    REQUIRE(from != std::string::npos);
    const std::string section = doc.substr(from, doc.find("\n## ", from + 1) - from);
    for (const ModelField& f : kModelFields) {
        INFO(f.key);
        CHECK_THAT(section, ContainsSubstring("\n" + std::string(f.key) + " = "));
    }
    for (const char* key : {"factor", "low_freq_factor", "high_freq_factor", "original_max_positions"}) {
        INFO(key);
        CHECK_THAT(section, ContainsSubstring(std::string(key) + " = "));
    }
}

TEST_CASE("a cell's progress label names every axis keyed only when set, when it is set", "[axes]") {
    const auto cells = parse_matrix("name = \"l\"\n[defaults]\nmodel = \"tiny\"\nbackend = \"uvm-prefetch\"\nbudget = \"50%\"\n"
                                    "[[sweep]]\nname = \"s\"\nevict = [\"migrate\", \"read-mostly\"]\nrepeat = [1, 2]\n",
                                    "test")
                           .cells;
    REQUIRE(cells.size() == 4);
    std::set<std::string> labels;
    for (const CellParams& c : cells) labels.insert(c.label());
    CHECK(labels.size() == 4);
    CHECK(cells[0].label() == "tiny uvm-prefetch baseline fp32 b1 s64 streams=1 prefetch=off budget=50%");
    CHECK_THAT(cells[3].label(), ContainsSubstring("budget=50% evict=read-mostly repeat=2"));
}

TEST_CASE("the registry names placement axes only, and every GPU backend uses the GPU forward's", "[axes]") {
    for (const BackendTraits& backend : backend_registry()) {
        INFO(enum_name(backend.id));
        for (const std::string_view name : backend.placement_axes) {
            INFO(name);
            const Axis* axis = find_axis(name);
            REQUIRE(axis);
            CHECK(axis->role == Axis::Role::placement);
        }
        CHECK(backend.uses("launch") == backend.needs_gpu);
        CHECK(backend.uses("activations") == backend.needs_gpu);
    }
}
