// The command line as a user meets it: help, version, exit codes, and bad input refused with a
// clear message before anything is written.
#include <algorithm>
#include <catch2/catch_test_macros.hpp>

#include <filesystem>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <utility>

#include "harness/store/sqlite.hpp"
#include "harness/store/store.hpp"

#include "test_support.hpp"

using sweetspot::test::run_sweetspot;
using sweetspot::test::TempDir;
using sweetspot::test::write_file;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("--help and --version", "[cli]") {
    const auto top = run_sweetspot("--help");
    CHECK(top.exit_code == 0);
    CHECK(contains(top.output, "usage: sweetspot <command>"));
    for (const char* cmd : {"run", "list", "summary", "trace"}) {
        INFO(cmd);
        const auto r = run_sweetspot(std::string(cmd) + " --help");
        CHECK(r.exit_code == 0);
        CHECK(contains(r.output, std::string("usage: sweetspot ") + cmd));
        CHECK(contains(r.output, "--help"));
    }
    const auto v = run_sweetspot("--version");
    CHECK(v.exit_code == 0);
    CHECK(v.output.rfind("sweetspot 0.", 0) == 0);
}

TEST_CASE("a process that multiplies nothing on a GPU does not load cuBLAS", "[cli]") {
    // glibc's loader names every library it loads (LD_DEBUG=files): cuBLAS and cuBLASLt (0.4 s of
    // relocations) come with the first GPU GEMM, not with the process.
    const auto r = sweetspot::test::run_command("LD_DEBUG=files '" + sweetspot::test::sweetspot_binary() + "' summary --help");
    CHECK(r.exit_code == 0);
    CHECK(contains(r.output, "file=libsqlite3.so"));  // the loader's report is there
    CHECK_FALSE(contains(r.output, "libcublas"));
}

TEST_CASE("usage errors exit with status 2", "[cli]") {
    CHECK(run_sweetspot("").exit_code == 2);
    const auto unknown = run_sweetspot("frobnicate");
    CHECK(unknown.exit_code == 2);
    CHECK(contains(unknown.output, "unknown command 'frobnicate'"));
    const auto bad_opt = run_sweetspot("list --frobnicate");
    CHECK(bad_opt.exit_code == 2);
    CHECK(contains(bad_opt.output, "sweetspot list --help"));
    CHECK(run_sweetspot("run").exit_code == 2);
    CHECK(run_sweetspot("run x.toml --timeout soon").exit_code == 2);
}

TEST_CASE("a bad matrix is refused with file:line:col and nothing is written", "[cli]") {
    TempDir tmp;
    write_file(tmp.file("bad.toml"), "[defaults]\nmodel = \"tiny\"\nbatch = 0\n");
    const auto db = tmp.file("out.db");
    const auto r = run_sweetspot("run '" + tmp.file("bad.toml") + "' --db '" + db + "'");
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, tmp.file("bad.toml") + ":3:"));
    CHECK(contains(r.output, "'batch'"));
    CHECK_FALSE(std::filesystem::exists(db));

    const auto missing = run_sweetspot("list '" + tmp.file("nope.toml") + "'");
    CHECK(missing.exit_code == 2);
    CHECK(contains(missing.output, "cannot read matrix file"));
}

TEST_CASE("summary refuses what is not a results database", "[cli]") {
    TempDir tmp;
    const auto missing = run_sweetspot("summary '" + tmp.file("nope.db") + "'");
    CHECK(missing.exit_code == 2);
    CHECK(contains(missing.output, "no such database"));
    write_file(tmp.file("junk.db"), std::string(4096, 'x'));
    CHECK(run_sweetspot("summary '" + tmp.file("junk.db") + "'").exit_code == 2);
}

TEST_CASE("list shows the cells; run and summary agree with it", "[cli]") {
    TempDir tmp;
    write_file(tmp.file("m.toml"), R"(name = "clitest"
[defaults]
model = "tiny"
seq = 8
iterations = 2
[[sweep]]
batch = [1, 2, 3]
)");
    const auto list = run_sweetspot("list '" + tmp.file("m.toml") + "'");
    CHECK(list.exit_code == 0);
    CHECK(contains(list.output, "clitest"));
    CHECK(contains(list.output, "3 cells"));

    const auto db = tmp.file("r.db");
    const auto run = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "'");
    INFO(run.output);
    CHECK(run.exit_code == 0);
    CHECK(contains(run.output, "3 ok"));

    const auto summary = run_sweetspot("summary '" + db + "'");
    INFO(summary.output);
    CHECK(summary.exit_code == 0);
    CHECK(contains(summary.output, "median ms"));
    CHECK(contains(summary.output, "tokens/s"));
    CHECK(contains(summary.output, "3 ok"));
}

TEST_CASE("list's 'runnable here' agrees with what run then does, cell for cell", "[cli]") {
    // Host cells that run and that cannot (fp16, a fused variant), and GPU cells that run only
    // where a GPU is visible, one of them with a budget no backend can honour.
    TempDir tmp;
    write_file(tmp.file("m.toml"), R"([defaults]
model = "tiny"
seq = 8
warmups = 0
iterations = 1
[[sweep]]
backend = "host"
dtype = ["fp32", "fp16"]
[[sweep]]
backend = "host"
variant = "attn_ln"
[[sweep]]
backend = ["device", "uvm"]
budget = ["100%", "1%"]
)");
    const auto list = run_sweetspot("list '" + tmp.file("m.toml") + "'");
    INFO(list.output);
    REQUIRE(list.exit_code == 0);
    std::map<int, bool> listed;  // cell index -> runnable here
    std::istringstream lines(list.output);
    for (std::string line; std::getline(lines, line);) {
        std::istringstream words(line);
        int index = -1;
        if (!(words >> index)) continue;
        listed[index] = contains(line, " yes");
    }
    REQUIRE(listed.size() == 7);

    const auto db = tmp.file("r.db");
    const auto run = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "'");
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    sweetspot::Database results(db, sweetspot::Database::Mode::read_only);
    auto st = results.prepare("SELECT cell_index, status FROM cells");
    int rows = 0;
    while (st.step()) {
        ++rows;
        INFO("cell " << st.int64(0) << ": " << st.text(1));
        CHECK(listed.at(static_cast<int>(st.int64(0))) == (st.text(1) != "skipped"));
    }
    CHECK(rows == 7);
    CHECK(listed.at(0));        // host fp32
    CHECK_FALSE(listed.at(1));  // host fp16
    CHECK_FALSE(listed.at(2));  // host fused variant
}

TEST_CASE("summary --format csv, json and markdown: the cells table for other tools; run ends with its cells", "[cli]") {
    TempDir tmp;
    write_file(tmp.file("m.toml"), "[defaults]\nmodel = \"tiny\"\nseq = 8\niterations = 2\n[[sweep]]\nbatch = [1, 2, 3]\n");
    const auto db = tmp.file("f.db");
    const auto run = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "' 2>/dev/null");
    INFO(run.output);
    REQUIRE(run.exit_code == 0);
    // stdout alone (progress goes to stderr): the cells of this run.
    CHECK(contains(run.output, "Cells\n"));
    CHECK(contains(run.output, "3 ok"));

    const auto csv = run_sweetspot("summary '" + db + "' --format csv");
    REQUIRE(csv.exit_code == 0);
    CHECK(csv.output.rfind("cell_id,cell_index,cell_key,model,n_layer,", 0) == 0);
    CHECK(contains(csv.output, ",status,timed_iterations,latency_median_ms,latency_p10_ms,latency_p90_ms,spread_pct,noisy,"));
    CHECK(std::count(csv.output.begin(), csv.output.end(), '\n') == 4);  // the header and three cells
    CHECK_FALSE(contains(csv.output, "Runs"));

    const auto json = run_sweetspot("summary '" + db + "' --format json");
    REQUIRE(json.exit_code == 0);
    CHECK(json.output.rfind("[", 0) == 0);
    CHECK(contains(json.output, "\"batch\": 3,"));
    CHECK(contains(json.output, "\"status\": \"ok\","));
    CHECK(contains(json.output, "\"latency_median_ms\": "));

    const auto md = run_sweetspot("summary '" + db + "' --format markdown");
    REQUIRE(md.exit_code == 0);
    CHECK(md.output.rfind("| cell | # | model |", 0) == 0);
    CHECK(contains(md.output, "|---:|---:|---|"));

    const auto bad = run_sweetspot("summary '" + db + "' --format xml");
    CHECK(bad.exit_code == 2);
    CHECK(contains(bad.output, "--format expects table, csv, json or markdown"));
}

TEST_CASE("help COMMAND is COMMAND --help; a missing positional argument is named as the usage names it", "[cli]") {
    const auto help = run_sweetspot("help run");
    CHECK(help.exit_code == 0);
    CHECK(help.output == run_sweetspot("run --help").output);
    const auto missing = run_sweetspot("run");
    CHECK(missing.exit_code == 2);
    CHECK(contains(missing.output, "missing MATRIX (usage: sweetspot run FILE"));
    CHECK_FALSE(contains(missing.output, "--matrix"));
    const auto no_db = run_sweetspot("summary");
    CHECK(no_db.exit_code == 2);
    CHECK(contains(no_db.output, "missing DB"));
}

TEST_CASE("run --set: the overridden cells are run and the run records the command line", "[cli][set]") {
    TempDir tmp;
    const auto matrix = tmp.file("m.toml"), db = tmp.file("r.db");
    write_file(matrix, "name = \"set\"\n[defaults]\nmodel = \"tiny\"\nwarmups = 0\niterations = 1\n"
                             "[[sweep]]\nname = \"s\"\nbatch = [1, 2, 4]\n");
    const auto listed = run_sweetspot("list '" + matrix + "' --set batch=3");
    INFO(listed.output);
    REQUIRE(listed.exit_code == 0);
    CHECK(contains(listed.output, "1 cells\nset on the command line, in every sweep: batch=3"));
    const auto r = run_sweetspot("run '" + matrix + "' --db '" + db + "' --set batch=3,5");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    sweetspot::Database d(db, sweetspot::Database::Mode::read_only);
    auto st = d.prepare("SELECT group_concat(batch, ' '), (SELECT command_line FROM runs) FROM (SELECT batch FROM cells ORDER BY batch)");
    REQUIRE(st.step());
    CHECK(st.text(0) == "3 5");
    CHECK(contains(st.text(1), "--set batch=3,5"));
    const auto bad = run_sweetspot("run '" + matrix + "' --db '" + db + "' --set batch=-1");
    CHECK(bad.exit_code == 2);
    CHECK(contains(bad.output, "--set batch=-1"));
}

TEST_CASE("an axis given twice by --set is refused naming both values; a matrix --set makes too large names --set", "[cli][set]") {
    TempDir tmp;
    const auto matrix = tmp.file("m.toml"), db = tmp.file("r.db");
    write_file(matrix, "name = \"set\"\n[defaults]\nmodel = \"tiny\"\n[[sweep]]\nname = \"s\"\nbatch = [1, 2]\n");
    const auto twice = run_sweetspot("list '" + matrix + "' --set batch=1 --set batch=2,4");
    CHECK(twice.exit_code == 2);
    CHECK(contains(twice.output, "--set gives batch twice"));
    CHECK(contains(twice.output, "'batch=1'"));
    CHECK(contains(twice.output, "'batch=2,4'"));
    CHECK(run_sweetspot("run '" + matrix + "' --db '" + db + "' --set batch=1 --set batch=2").exit_code == 2);
    CHECK_FALSE(std::filesystem::exists(db));

    // 400 batches times 300 seeds: 120000 cells, more than a matrix may have; the file alone has 2.
    const auto numbers = [](int n) {
        std::string text;
        for (int i = 1; i <= n; ++i) text += (i > 1 ? "," : "") + std::to_string(i);
        return text;
    };
    const auto large = run_sweetspot("list '" + matrix + "' --set batch=" + numbers(400) + " --set seed=" + numbers(300));
    INFO(large.output);
    CHECK(large.exit_code == 2);
    CHECK(contains(large.output, "--set"));
    CHECK(contains(large.output, "120000 cells"));
    CHECK_FALSE(contains(large.output, matrix + ":"));
    // A file too large of itself is still named at its line, whatever --set changes besides.
    const auto big = tmp.file("big.toml");
    write_file(big, "[defaults]\nmodel = \"tiny\"\n[[sweep]]\nname = \"s\"\nbatch = [" + numbers(400) + "]\nseed = [" +
                        numbers(300) + "]\n");
    const auto file_large = run_sweetspot("list '" + big + "' --set dtype=fp32");
    INFO(file_large.output);
    CHECK(file_large.exit_code == 2);
    CHECK(contains(file_large.output, big + ":3:"));
}

TEST_CASE("a database this user may not read is said to be unreadable, not to be another program's file", "[cli][store]") {
    const auto as_user = sweetspot::test::as_unprivileged_user();
    if (!as_user) SKIP("as root, reading as a user whom file permissions stop needs setpriv");
    namespace fs = std::filesystem;
    TempDir tmp;
    const auto open_to_all = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                             fs::perms::others_exec;
    fs::permissions(tmp.file(""), open_to_all);
    const std::string locked = tmp.file("locked"), open = tmp.file("open");
    fs::create_directories(locked);
    fs::create_directories(open);
    fs::permissions(open, open_to_all);
    sweetspot::Store::open(locked + "/r.db");
    sweetspot::Store::open(open + "/secret.db");
    fs::permissions(locked, fs::perms::none);
    fs::permissions(open + "/secret.db", fs::perms::none);
    for (const std::string& db : {locked + "/r.db", open + "/secret.db"}) {
        const auto r = sweetspot::test::run_command(*as_user + "'" + sweetspot::test::sweetspot_binary() + "' summary '" + db + "'");
        INFO(r.output);
        CHECK(r.exit_code == 2);
        CHECK(contains(r.output, "cannot read " + db + ": permission denied"));
        CHECK_FALSE(contains(r.output, "not a sweetspot results database"));
    }
    fs::permissions(locked, fs::perms::owner_all);
}

TEST_CASE("summary flags a cell faster than a bound it is divided by", "[cli]") {
    TempDir tmp;
    write_file(tmp.file("m.toml"), R"(
[defaults]
model = "tiny"
seq = 8
iterations = 1
[[sweep]]
backend = ["device", "explicit-copy"]
budget = "50%"
)");
    const std::string db = tmp.file("m.db");
    run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "' --set budget=100%,50%");
    {
        // Measured as if on a GPU: a 10 GB/s link; the device cell 1 ms; the explicit-copy cell
        // streams 1 GB, 100 ms on that link, in 80 ms: 0.8 x its bound.
        sweetspot::Database d(db, sweetspot::Database::Mode::read_write);
        d.exec("UPDATE runs SET h2d_gbps = 10");
        d.exec("UPDATE cells SET status = 'ok', latency_median_ms = 1.0, streamed_bytes = 0 WHERE backend = 'device'");
        d.exec("UPDATE cells SET status = 'ok', latency_median_ms = 80.0, streamed_bytes = 1000000000 "
               "WHERE backend = 'explicit-copy' AND budget = '50%'");
    }
    const auto r = run_sweetspot("summary '" + db + "'");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    const auto section = r.output.find("Cells faster than a bound they are divided by");
    REQUIRE(section != std::string::npos);
    const std::string rest = r.output.substr(section);
    CHECK(contains(rest, "bound  "));
    CHECK(contains(rest, "0.800"));
    CHECK(std::count(rest.begin(), rest.end(), '\n') == 4);  // heading, column names, rule, one cell

    const auto without = sweetspot::test::run_command("SWEETSPOT_PYTHON=/nonexistent/python3 '" + sweetspot::test::sweetspot_binary() + "' summary '" + db + "'");
    CHECK(contains(without.output, "Bounds not checked: python3 was not found (tried /nonexistent/python3)"));
}

TEST_CASE("a truncated database, and a file that is not SQLite, are named for what they are", "[cli][store]") {
    TempDir tmp;
    const std::string whole = tmp.file("whole.db"), cut = tmp.file("cut.db"), junk = tmp.file("junk.db"), other = tmp.file("other.db");
    sweetspot::Store::open(whole);
    const std::string bytes = sweetspot::test::read_bytes(whole);
    REQUIRE(bytes.size() >= 4 * 4096);
    write_file(cut, bytes.substr(0, bytes.size() / 2 + 100));
    write_file(junk, std::string(4096, 'x'));
    {
        sweetspot::Database d(other, sweetspot::Database::Mode::read_write_create);
        d.exec("CREATE TABLE notes (text TEXT)");
    }
    for (const std::string command : {"summary", "run"}) {
        INFO(command);
        const auto says = [&](const std::string& db) {
            write_file(tmp.file("m.toml"), "[defaults]\nmodel = \"tiny\"\nseq = 8\niterations = 1\n");
            return run_sweetspot(command == "run" ? "run '" + tmp.file("m.toml") + "' --db '" + db + "'" : "summary '" + db + "'");
        };
        const auto truncated = says(cut);
        INFO(truncated.output);
        CHECK(truncated.exit_code == 2);
        CHECK(contains(truncated.output, cut + " is truncated: its header says " + std::to_string(bytes.size()) + " bytes, the file has " +
                                             std::to_string(bytes.size() / 2 + 100)));
        CHECK_FALSE(contains(truncated.output, "not a sweetspot results database"));
        const auto not_sqlite = says(junk);
        INFO(not_sqlite.output);
        CHECK(not_sqlite.exit_code == 2);
        CHECK(contains(not_sqlite.output, junk + " is not an SQLite database"));
        CHECK_FALSE(contains(not_sqlite.output, "not a sweetspot results database"));
        const auto theirs = says(other);
        CHECK(theirs.exit_code == 2);
        CHECK(contains(theirs.output, other + " is an SQLite database but not a sweetspot results database"));
    }
    CHECK(sweetspot::test::read_bytes(cut) == bytes.substr(0, bytes.size() / 2 + 100));
}

TEST_CASE("a folder given as a database is said to be a folder", "[cli][store]") {
    TempDir tmp;
    const std::string dir = tmp.file("dir");
    std::filesystem::create_directories(dir);
    write_file(tmp.file("m.toml"), "[defaults]\nmodel = \"tiny\"\nseq = 8\niterations = 1\n");
    for (const std::string& args : {"run '" + tmp.file("m.toml") + "' --db '" + dir + "'", "summary '" + dir + "'"}) {
        const auto r = run_sweetspot(args);
        INFO(r.output);
        CHECK(r.exit_code == 2);
        CHECK(contains(r.output, dir + " is a folder, not a database file"));
        CHECK_FALSE(contains(r.output, "disk I/O error"));
    }
    CHECK(std::filesystem::is_empty(dir));
}

TEST_CASE("trace refuses a negative --iteration as bad input", "[cli][trace]") {
    TempDir tmp;
    const auto db = tmp.file("r.db");
    write_file(tmp.file("m.toml"), "[defaults]\nmodel = \"tiny\"\nseq = 8\nwarmups = 0\niterations = 1\n");
    REQUIRE(run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "'").exit_code == 0);
    const auto r = run_sweetspot("trace '" + db + "' --cell 1 --iteration -1 -o '" + tmp.file("t.json") + "'");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "--iteration expects a traced iteration's number, 0 or more; got -1"));
    CHECK_FALSE(contains(r.output, "trace_iterations > -1"));
    CHECK_FALSE(std::filesystem::exists(tmp.file("t.json")));
}

TEST_CASE("a mistyped command or --only axis gets a did-you-mean, as a matrix key does", "[cli]") {
    const auto command = run_sweetspot("sumary results/x.db");
    CHECK(command.exit_code == 2);
    CHECK(contains(command.output, "sweetspot: unknown command 'sumary' (did you mean 'summary'?)"));
    // Far from every command: no guess.
    CHECK_FALSE(contains(run_sweetspot("frobnicate").output, "did you mean"));
    const auto only = run_sweetspot("list '" + sweetspot::test::source_path("experiments/demo.toml") + "' --only bacth=1");
    CHECK(only.exit_code == 2);
    CHECK(contains(only.output, "got 'bacth=1' (did you mean 'batch'?)"));
}

TEST_CASE("a --set value that does not fit the matrix is blamed on --set, not on a line of the file", "[cli][set]") {
    TempDir tmp;
    const auto matrix = tmp.file("m.toml");
    // The checks that weigh one axis against another: seq against the model's positions, batch
    // times seq against the tokens a cell may have.
    write_file(matrix, "name = \"set\"\n[defaults]\nmodel = \"tiny\"\nseq = 8\n[[sweep]]\nname = \"s\"\nbatch = [1, 2]\n");
    const std::map<std::string, std::string> refused = {
        {"seq=256", "--set seq=256: 'seq' = 256 is longer than model 'tiny' allows (128 positions)"},
        {"batch=200000", "--set batch=200000: 'batch' = 200000 with 'seq' = 8 is 1600000 tokens per forward"}};
    for (const auto& [set, says] : refused) {
        const auto r = run_sweetspot("list '" + matrix + "' --set " + set);
        INFO(set << ": " << r.output);
        CHECK(r.exit_code == 2);
        CHECK(contains(r.output, says));
        CHECK_FALSE(contains(r.output, matrix + ":"));
    }
    // The file's own seq is too long for the model --set gives: --set model is named.
    write_file(matrix, "[defaults]\nmodel = \"tiny\"\nseq = 100\n");
    CHECK(run_sweetspot("list '" + matrix + "'").exit_code == 0);
    const auto model = run_sweetspot("list '" + matrix + "' --set model=tiny_odd");
    INFO(model.output);
    CHECK(model.exit_code == 2);
    CHECK(contains(model.output, "--set model=tiny_odd: 'seq' = 100 is longer than model 'tiny_odd' allows (64 positions)"));
    CHECK_FALSE(contains(model.output, matrix + ":"));
    // The same matrix without --set is still blamed at its line.
    write_file(matrix, "[defaults]\nmodel = \"tiny_odd\"\nseq = 100\n");
    const auto line = run_sweetspot("list '" + matrix + "'");
    CHECK(line.exit_code == 2);
    CHECK(contains(line.output, matrix + ":3:"));
}

TEST_CASE("a cell keeps its cell_id when it is run again, and --cell takes its key or the key's first digits", "[cli]") {
    TempDir tmp;
    const auto matrix = tmp.file("m.toml"), db = tmp.file("r.db");
    write_file(matrix, "name = \"again\"\n[defaults]\nmodel = \"tiny\"\nseq = 8\nwarmups = 0\niterations = 1\n"
                       "[[sweep]]\nname = \"s\"\nbatch = [1, 2, 3]\n");
    const auto ids = [&] {
        std::map<std::int64_t, std::pair<std::string, std::int64_t>> out;  // cell_id: key, batch
        sweetspot::Database d(db, sweetspot::Database::Mode::read_only);
        for (auto st = d.prepare("SELECT cell_id, cell_key, batch FROM cells"); st.step();)
            out[st.int64(0)] = {st.text(1), st.int64(2)};
        return out;
    };
    REQUIRE(run_sweetspot("run '" + matrix + "' --db '" + db + "'").exit_code == 0);
    const auto first = ids();
    REQUIRE(first.size() == 3);
    const auto [cell, key_and_batch] = *std::next(first.begin());
    const std::string expected = "Cell " + std::to_string(cell) + ": tiny, host, fp32, batch " +
                                 std::to_string(key_and_batch.second) + ", seq 8";
    CHECK(contains(run_sweetspot("summary '" + db + "' --cell " + std::to_string(cell)).output, expected));

    const auto again = run_sweetspot("run '" + matrix + "' --db '" + db + "' --rerun");
    INFO(again.output);
    REQUIRE(again.exit_code == 0);
    CHECK(ids() == first);
    sweetspot::Database d(db, sweetspot::Database::Mode::read_only);
    auto history = d.prepare("SELECT count(*) FROM cell_history");
    REQUIRE(history.step());
    CHECK(history.int64(0) == 3);  // the first measurements, kept
    const auto by_id = run_sweetspot("summary '" + db + "' --cell " + std::to_string(cell));
    INFO(by_id.output);
    CHECK(by_id.exit_code == 0);
    CHECK(contains(by_id.output, expected));

    // The key, whole or its first digits where no other key begins so.
    const std::string key = key_and_batch.first;
    std::size_t unique = 1;
    for (const auto& [id, other] : first)
        while (id != cell && other.first.compare(0, unique, key, 0, unique) == 0) ++unique;
    // A cell_id is taken first: the first digits tried are as many as it takes to be none of the ids.
    const auto an_id = [&](const std::string& text) {
        return std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
               first.count(std::stoll(text));
    };
    std::size_t tried = unique;
    while (an_id(key.substr(0, tried))) ++tried;
    for (const std::string& name : {key, key.substr(0, tried)}) {
        const auto r = run_sweetspot("summary '" + db + "' --cell " + name);
        INFO(name << ": " << r.output);
        CHECK(contains(r.output, expected));
    }
    if (unique > 1 && !an_id(key.substr(0, unique - 1))) {
        const auto shared = run_sweetspot("summary '" + db + "' --cell " + key.substr(0, unique - 1));
        INFO(shared.output);
        CHECK(shared.exit_code == 2);
        CHECK(contains(shared.output, "give more of the key"));
    }
}
