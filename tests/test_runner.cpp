// The cell runner, end to end through the sweetspot binary: each failure mode of a cell process
// becomes a recorded status, the sweep goes on, and a killed sweep resumes without duplicates.
#include <catch2/catch_approx.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <catch2/catch_test_macros.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness/matrix/matrix.hpp"
#include "harness/runner/cell_sharing.hpp"
#include "harness/runner/progress.hpp"
#include "harness/runner/run_metadata.hpp"
#include "harness/store/sqlite.hpp"
#include "harness/store/store.hpp"
#include "harness/system/memory_bandwidth.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using namespace std::chrono_literals;
using sweetspot::test::run_sweetspot;
using sweetspot::test::TempDir;
using sweetspot::test::write_file;

namespace {

struct CellRow {
    std::string status, reason, stderr_tail;
    std::int64_t run_id = 0, iterations = 0;
};

// Cells by cell_index.
std::map<int, CellRow> read_cells(const std::string& db_path) {
    auto store = Store::open_read_only(db_path);
    auto st = store.db().prepare(
        "SELECT cell_index, status, coalesce(reason, ''), coalesce(stderr_tail, ''), run_id,"
        " (SELECT count(*) FROM iterations i WHERE i.cell_id = c.cell_id) FROM cells c");
    std::map<int, CellRow> rows;
    while (st.step())
        rows[static_cast<int>(st.int64(0))] = {st.text(1), st.text(2), st.text(3), st.int64(4), st.int64(5)};
    return rows;
}

std::int64_t scalar(const std::string& db_path, const std::string& sql) {
    Database db(db_path, Database::Mode::read_only);
    auto st = db.prepare(sql);
    return st.step() ? st.int64(0) : -1;
}

std::string scalar_text(const std::string& db_path, const std::string& sql) {
    Database db(db_path, Database::Mode::read_only);
    auto st = db.prepare(sql);
    return st.step() ? st.text(0) : "";
}

// Starts `sweetspot args...` in the background with its output discarded.
pid_t spawn_sweetspot(const std::vector<std::string>& args) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const std::string binary = test::sweetspot_binary();
        std::vector<char*> argv{const_cast<char*>(binary.c_str())};
        for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        execv(binary.c_str(), argv.data());
        _exit(127);
    }
    return pid;
}

template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
        if (pred()) return true;
        std::this_thread::sleep_for(20ms);
    }
    return pred();
}

std::int64_t cell_count_or_zero(const std::string& db) {
    if (!std::filesystem::exists(db)) return 0;
    try {
        return scalar(db, "SELECT count(*) FROM cells");
    } catch (const std::exception&) {
        return 0;  // the schema is being created
    }
}

// The cell process whose command line contains `needle` (cell processes carry their canonical
// text in argv), if one runs.
std::optional<pid_t> cell_process_with(const std::string& needle) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
        std::string cmdline;
        try {
            std::ifstream f(entry.path() / "cmdline", std::ios::binary);
            cmdline.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
        } catch (const std::ios_base::failure&) {
            continue;  // the process exited while its command line was read
        }
        if (cmdline.find(needle) != std::string::npos && cmdline.find("_cell") != std::string::npos)
            return static_cast<pid_t>(std::stol(entry.path().filename().string()));
    }
    return std::nullopt;
}

// True while any cell process's command line contains `needle`.
bool process_running_with(const std::string& needle) { return cell_process_with(needle).has_value(); }

// A seed that no other test process running at the same time uses (`base` then this process's
// id): the tests find their cell processes by the seed in the cells' command lines, and two runs
// of this binary side by side must not find, or kill, each other's.
std::string own_seed(int base) { return std::to_string(std::int64_t{base} * 10'000'000 + ::getpid()); }

// A word for /bin/sh whatever it holds: single-quoted, each ' written as '\''.
std::string sh_word(const std::string& text) {
    std::string out = "'";
    for (const char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

// The words sbatch takes from a batch script, read as Slurm's sbatch reads them (src/sbatch/opt.c):
// the #SBATCH lines before the first line that is neither blank nor a comment; in each, blanks
// separate words, '...' and "..." group, a backslash takes the next character as it is (inside
// quotes too), and an unquoted # ends the line. A quote left open is an error to sbatch: "(unmatched)".
std::vector<std::string> sbatch_words(const std::string& script) {
    std::vector<std::string> words;
    std::istringstream lines(script);
    for (std::string line; std::getline(lines, line);) {
        if (!line.empty() && line[0] != '#') break;
        if (!line.starts_with("#SBATCH")) continue;
        std::string word;
        bool in_word = false, escaped = false;
        char quote = 0;
        for (const char c : line.substr(7)) {
            if (escaped) {
                word += c;
                escaped = false;
            } else if (c == '\\') {
                escaped = in_word = true;
            } else if (quote) {
                if (c == quote) quote = 0;
                else word += c;
            } else if (c == '"' || c == '\'') {
                quote = c;
                in_word = true;
            } else if (c == '#') {
                break;
            } else if (c == ' ' || c == '\t') {
                if (in_word) words.push_back(word);
                word.clear();
                in_word = false;
            } else {
                word += c;
                in_word = true;
            }
        }
        if (quote) words.push_back("(unmatched)");
        if (in_word) words.push_back(word);
    }
    return words;
}

const char* kFaultMatrix = R"(name = "faults"
[defaults]
model = "tiny"
seq = 8
warmups = 0
iterations = 2
[[sweep]]
debug_fault = ["none", "segfault", "abort", "exit", "hang"]
)";

}  // namespace

TEST_CASE("every way a cell process can fail becomes a status, and the sweep goes on", "[runner]") {
    TempDir tmp;
    write_file(tmp.file("faults.toml"), kFaultMatrix);
    const auto db = tmp.file("faults.db");
    const auto r = run_sweetspot("run '" + tmp.file("faults.toml") + "' --db '" + db + "' --timeout 3s");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    const auto cells = read_cells(db);
    REQUIRE(cells.size() == 5);

    CHECK(cells.at(0).status == "ok");
    CHECK(cells.at(0).iterations == 2);

    CHECK(cells.at(1).status == "failed");
    CHECK(cells.at(1).reason == "killed by signal 11 (Segmentation fault)");
    CHECK(cells.at(1).stderr_tail.find("failing on purpose") != std::string::npos);

    CHECK(cells.at(2).status == "failed");
    CHECK(cells.at(2).reason == "killed by signal 6 (Aborted)");

    CHECK(cells.at(3).status == "failed");
    CHECK(cells.at(3).reason == "exited with status 3");

    CHECK(cells.at(4).status == "timeout");
    CHECK(cells.at(4).reason.find("timeout of 3 s") != std::string::npos);
    for (int i = 1; i <= 4; ++i) CHECK(cells.at(i).iterations == 0);

    CHECK(r.output.find("[5/5]") != std::string::npos);
    CHECK(r.output.find("ETA") != std::string::npos);
    CHECK(scalar_text(db, "SELECT status FROM runs") == "finished");
}

TEST_CASE("cells that cannot run here are skipped with the reason, and skipping is not failing", "[runner]") {
    TempDir tmp;
    write_file(tmp.file("m.toml"), R"(
[defaults]
model = "tiny"
seq = 8
iterations = 1
mode = "train"
[[sweep]]
variant = ["baseline", "dropout_ln"]
)");
    const auto db = tmp.file("m.db");
    const auto r = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "'");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    const auto cells = read_cells(db);
    REQUIRE(cells.size() == 2);
    CHECK(cells.at(0).status == "ok");
    CHECK(cells.at(1).status == "skipped");
    CHECK(cells.at(1).reason ==
          "training runs the fusions mlp_epilogue+flash_attention+proj_epilogue+inplace_ln+inplace_gelu and none other "
          "yet; variant "
          "'dropout_ln' has residual_ln");
}

TEST_CASE("a sweep whose every cell is skipped exits 1 and says why nothing was measured", "[runner]") {
    TempDir tmp;
    write_file(tmp.file("m.toml"), R"(
[defaults]
model = "tiny"
seq = 8
iterations = 1
mode = "train"
variant = "dropout_ln"
[[sweep]]
batch = [1, 2, 3]
)");
    const auto db = tmp.file("m.db");
    const auto r = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "'");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("nothing was measured: every cell was skipped, 3 of 3 because training runs the fusions "
                        "mlp_epilogue+flash_attention+proj_epilogue+inplace_ln+inplace_gelu and none other yet") !=
                        std::string::npos);
    const auto cells = read_cells(db);
    REQUIRE(cells.size() == 3);
    for (const auto& [index, c] : cells) CHECK(c.status == "skipped");

    // Run again: the skipped cells are still skipped, so still nothing measured.
    CHECK(run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "'").exit_code == 1);
}

TEST_CASE("a sweep killed with SIGKILL resumes without duplicate or partial cells", "[runner]") {
    TempDir tmp;
    // A unique seed lets the test find this sweep's cell processes among others.
    const std::string seed = own_seed(424242);
    write_file(tmp.file("m.toml"), R"(
[defaults]
model = "tiny"
seq = 8
warmups = 0
iterations = 2
seed = )" + seed + R"(
[[sweep]]
batch = [1, 2]
[[sweep]]
debug_fault = "hang"
[[sweep]]
batch = [3, 4]
)");
    const auto db = tmp.file("m.db");
    const pid_t parent = spawn_sweetspot({"run", tmp.file("m.toml"), "--db", db, "--timeout", "120s"});
    REQUIRE(wait_until([&] { return cell_count_or_zero(db) == 2; }, 60s));
    REQUIRE(wait_until([&] { return process_running_with("seed=" + seed); }, 10s));  // the hanging cell
    kill(parent, SIGKILL);
    int status = 0;
    waitpid(parent, &status, 0);
    CHECK(WIFSIGNALED(status));
    // The cell process dies with its parent instead of hanging on.
    CHECK(wait_until([&] { return !process_running_with("seed=" + seed); }, 10s));

    auto cells = read_cells(db);
    REQUIRE(cells.size() == 2);
    for (const auto& [index, c] : cells) {
        CHECK(c.status == "ok");
        CHECK(c.iterations == 2);
    }
    CHECK(scalar_text(db, "SELECT status FROM runs") == "running");

    const auto r = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "' --timeout 2s");
    INFO(r.output);
    CHECK(r.exit_code == 1);  // the hanging cell times out
    CHECK(r.output.find("already ok in the database") != std::string::npos);
    cells = read_cells(db);
    REQUIRE(cells.size() == 5);
    CHECK(scalar(db, "SELECT count(DISTINCT cell_key) FROM cells") == 5);
    CHECK(cells.at(0).run_id == 1);
    CHECK(cells.at(1).run_id == 1);
    CHECK(cells.at(2).status == "timeout");
    CHECK(cells.at(3).status == "ok");
    CHECK(cells.at(3).run_id == 2);
    CHECK(cells.at(4).iterations == 2);
}

TEST_CASE("SIGINT stops a sweep, kills the running cell and marks the run interrupted", "[runner]") {
    TempDir tmp;
    const std::string seed = own_seed(515151);
    write_file(tmp.file("m.toml"), R"(
[defaults]
model = "tiny"
seq = 8
seed = )" + seed + R"(
[[sweep]]
debug_fault = "hang"
[[sweep]]
batch = 2
)");
    const auto db = tmp.file("m.db");
    const pid_t parent = spawn_sweetspot({"run", tmp.file("m.toml"), "--db", db});
    REQUIRE(wait_until([&] { return process_running_with("seed=" + seed); }, 30s));
    kill(parent, SIGINT);
    int status = 0;
    waitpid(parent, &status, 0);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 130);
    CHECK(scalar_text(db, "SELECT status FROM runs") == "interrupted");
    CHECK(cell_count_or_zero(db) == 0);
    CHECK(wait_until([&] { return !process_running_with("seed=" + seed); }, 10s));
}

TEST_CASE("--rerun measures cells that are already ok again; measuring longer is not another cell", "[runner]") {
    TempDir tmp;
    write_file(tmp.file("m.toml"), "[defaults]\nmodel = \"tiny\"\nseq = 8\niterations = 1\n[[sweep]]\nbatch = [1, 2]\n");
    const auto db = tmp.file("m.db");
    REQUIRE(run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "'").exit_code == 0);
    // More iterations and warm-ups measure the same cells longer: they are already done.
    auto again = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "' --set iterations=3 --set warmups=2");
    CHECK(again.exit_code == 0);
    CHECK(again.output.find("2 already done") != std::string::npos);
    CHECK(read_cells(db).at(0).run_id == 1);
    REQUIRE(run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "' --rerun --set iterations=3").exit_code == 0);
    const auto cells = read_cells(db);
    REQUIRE(cells.size() == 2);
    CHECK(cells.at(0).run_id == 3);
    CHECK(cells.at(1).run_id == 3);
    CHECK(scalar(db, "SELECT count(*) FROM cells WHERE iterations = 3") == 2);
    CHECK(scalar(db, "SELECT count(*) FROM runs") == 3);
    // The first measurements are kept as history: their rows and iterations, as JSON.
    CHECK(scalar(db, "SELECT count(*) FROM cell_history") == 2);
    CHECK(scalar(db, "SELECT count(*) FROM cell_history h JOIN cells c USING (cell_key)"
                     " WHERE json_extract(h.cell, '$.run_id') = 1 AND json_extract(h.cell, '$.status') = 'ok'"
                     " AND json_extract(h.cell, '$.latency_median_ms') > 0"
                     " AND json_extract(h.cell, '$.iterations') = 1"
                     " AND json_array_length(h.iterations) = json_extract(h.cell, '$.warmups') + 1") == 2);
    // summary shows the latest measurement of each cell and says there are earlier ones; --history lists them.
    const auto summary = run_sweetspot("summary '" + db + "'");
    CHECK_THAT(summary.output, Catch::Matchers::ContainsSubstring("2 earlier measurements of 2 of these cells"));
    const auto history = run_sweetspot("summary '" + db + "' --history --format csv");
    REQUIRE(history.exit_code == 0);
    std::istringstream csv(history.output);
    std::vector<std::string> lines;
    for (std::string line; std::getline(csv, line);) lines.push_back(line.substr(0, line.find('\r')));  // CSV ends lines in CRLF
    REQUIRE(lines.size() == 3);
    CHECK(lines[0] == "cell_id,cell_index,cell_key,started_at,run_id,status,timed_iterations,latency_median_ms,latency_p10_ms,"
                      "latency_p90_ms,noise_pct,superseded_at");
    for (const std::size_t i : {1u, 2u}) CHECK_THAT(lines[i], Catch::Matchers::ContainsSubstring(",1,ok,1,"));  // run 1, 1 timed
}

TEST_CASE("tokens/s is batch x seq over the median of the timed iterations", "[runner]") {
    TempDir tmp;
    const auto db = tmp.file("r.db");
    write_file(tmp.file("m.toml"), "[defaults]\nmodel = \"tiny\"\nbatch = 3\nseq = 20\nwarmups = 0\niterations = 4\n");
    const auto r = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);

    std::vector<double> timed;
    {
        Database results(db, Database::Mode::read_only);
        auto st = results.prepare("SELECT latency_ms FROM iterations WHERE phase = 'timed' ORDER BY latency_ms");
        while (st.step()) timed.push_back(st.real(0));
    }
    REQUIRE(timed.size() == 4);
    const double median_ms = (timed[1] + timed[2]) / 2;  // four sorted samples: the middle two
    const double tokens_per_s = std::stod(scalar_text(db, "SELECT tokens_per_s FROM cells"));
    CHECK(tokens_per_s == Catch::Approx(3 * 20 / (median_ms / 1000)).epsilon(1e-9));
}

TEST_CASE("each cell stores where its wall time went, phase by phase, and summary adds them up", "[runner]") {
    TempDir tmp;
    const auto db = tmp.file("p.db");
    write_file(tmp.file("m.toml"), "[defaults]\nmodel = \"tiny\"\nseq = 8\nwarmups = 2\niterations = 3\n[[sweep]]\nbatch = [1, 2]\n");
    const auto r = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);

    Database results(db, Database::Mode::read_only);
    auto cells = results.prepare("SELECT cell_id, wall_s FROM cells ORDER BY cell_id");
    int checked = 0;
    while (cells.step()) {
        std::vector<std::string> names;
        double child_and_exit = 0;
        auto st = results.prepare("SELECT phase, seconds FROM cell_phases WHERE cell_id = ? ORDER BY position");
        st.bind(1, cells.int64(0));
        while (st.step()) {
            names.push_back(st.text(0));
            CHECK(st.real(1) >= 0.0);
            if (st.text(0) != "collect") child_and_exit += st.real(1);
        }
        // A host cell: no GPU phases; the phases up to the child's exit tile its wall time.
        CHECK(names == std::vector<std::string>{"start", "tokens", "setup", "warmups", "timed", "check", "teardown",
                                                "write_and_exit", "collect"});
        CHECK(child_and_exit == Catch::Approx(cells.real(1)).margin(0.01));
        ++checked;
    }
    CHECK(checked == 2);

    const auto summary = run_sweetspot("summary '" + db + "'");
    CHECK_THAT(summary.output, Catch::Matchers::ContainsSubstring("Where the cells' time went"));
    CHECK_THAT(summary.output, Catch::Matchers::ContainsSubstring("write_and_exit"));

    // A kept reference forward is shown apart from the checks: the first cell's as recorded (its
    // `reference` phase, 1.5 s), the second's as a file before schema 14 recorded it (its whole check).
    {
        Database rw(db, Database::Mode::read_write);
        rw.exec("UPDATE cells SET check_reference_computed = 1, check_reference_key = 'k'");
        rw.exec("INSERT INTO cell_phases (cell_id, position, phase, seconds) SELECT min(cell_id), 99, 'reference', 1.5 FROM cells");
    }
    const auto apart = run_sweetspot("summary '" + db + "'");
    INFO(apart.output);
    const auto row = [&](const std::string& phase) {
        std::istringstream lines(apart.output);
        for (std::string line; std::getline(lines, line);) {
            std::istringstream words(line);
            std::string first, cells;
            if (words >> first >> cells && first == phase) return cells;
        }
        return std::string("absent");
    };
    CHECK(row("reference") == "2");
    CHECK(row("check") == "1");
    CHECK(row("timed") == "2");
}

TEST_CASE("the ETA weighs the cells left by their expected cost, at the seconds per cost the measured cells took",
          "[runner][progress]") {
    // Cells of cost 1 and 3 took 2 s and 6 s: 2 s per unit of cost, so a cost of 10 left takes
    // 20 s (a plain mean, 4 s a cell, would say 4 s for the one cell left).
    CHECK(remaining_seconds(1 + 3, 2 + 6, 10, 1) == Catch::Approx(20));
    CHECK(remaining_seconds(1 + 3, 2 + 6, 10, 2) == Catch::Approx(10));
    CHECK_FALSE(remaining_seconds(0, 0, 10, 1).has_value());

    std::ostringstream out;
    Progress progress(4, 1 + 3 + 10 + 5, out);
    progress.cell_done("resumed", "done", std::nullopt, "already ok in the database", 5, std::nullopt);
    CHECK_THAT(out.str(), Catch::Matchers::ContainsSubstring("ETA ?]"));  // nothing measured yet
    progress.cell_done("small", "ok", 1.0, "", 1, 2.0);
    // 2 s per unit of cost; left: 3 + 10.
    CHECK_THAT(out.str(), Catch::Matchers::ContainsSubstring("ETA 0:26]"));
    progress.cell_done("medium", "ok", 1.0, "", 3, 6.0);
    CHECK_THAT(out.str(), Catch::Matchers::EndsWith("ETA 0:20]\n"));
    progress.cell_done("large", "ok", 1.0, "", 10, 20.0);
    CHECK_THAT(out.str(), Catch::Matchers::EndsWith("ETA 0:00]\n"));
}

TEST_CASE("in a log, what the running cells say is printed at most once a tick, and only when it changed",
          "[runner][progress]") {
    std::ostringstream out;
    Progress progress(2, 2, out, 2, ProgressStyle{std::nullopt, 30});
    const auto lines = [&] {
        const std::string text = out.str();
        return std::count(text.begin(), text.end(), '\n');
    };
    CHECK(progress.tick_period_s() == 30);
    progress.cell_started(0, "cell A");
    progress.cell_status(0, "weights");
    CHECK(out.str().empty());  // nothing between ticks
    progress.tick();
    CHECK_THAT(out.str(), Catch::Matchers::StartsWith("running  cell A: weights (0:00)  [0:00 elapsed, ETA ?]\n"));
    progress.tick();  // nothing new
    CHECK(lines() == 1);

    progress.cell_started(1, "cell B");
    progress.cell_status(0, "iteration 1/5");
    progress.cell_status(0, "iteration 2/5");
    progress.tick();
    const std::string second = out.str().substr(out.str().find('\n') + 1);
    CHECK(second.starts_with("running  cell A: iteration 2/5 (0:00); cell B: starting (0:00)  [0:00 elapsed"));
    CHECK(out.str().find("iteration 1/5") == std::string::npos);

    progress.cell_ended(0);
    progress.cell_ended(1);
    progress.tick();  // nothing running
    CHECK(lines() == 2);
}

TEST_CASE("on a terminal, the running cells' line is redrawn in place, cut to its width", "[runner][progress]") {
    std::ostringstream out;
    Progress progress(1, 1, out, 1, ProgressStyle{40, 30});
    CHECK(progress.tick_period_s() == 1);
    progress.cell_started(0, "a cell with a rather long label");
    progress.cell_status(0, "warmup 1/3");
    // Each redraw erases the line drawn before (carriage return, erase in line) and writes the
    // first 39 columns of the new one.
    const std::string erase = "\r\033[K";
    const std::string cut = "running  a cell with a rather long labe";
    CHECK(out.str() == cut + erase + cut);
    out.str("");
    progress.cell_ended(0);
    progress.cell_done("a cell", "ok", 1.0, "", 1, 1.0);
    // The line is erased before the cell's own line, and nothing is left drawn after it.
    CHECK(out.str().starts_with(erase + "[1/1] ok"));
    CHECK(out.str().ends_with("]\n"));
    CHECK(out.str().find(erase, 1) == std::string::npos);
}

TEST_CASE("a running cell says its phase and iteration, which the sweep's progress and a timeout reason show",
          "[runner][progress]") {
    TempDir tmp;
    // Far more iterations than the timeout allows: the cell is killed mid-way through them.
    write_file(tmp.file("m.toml"), "[defaults]\nmodel = \"tiny\"\nseq = 8\nwarmups = 0\niterations = 1000000\n[[sweep]]\n");
    const auto db = tmp.file("m.db");
    const auto r = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "' --timeout 3s --progress-every 0.5s");
    INFO(r.output);
    CHECK(r.exit_code == 1);
    std::vector<std::string> running;
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);)
        if (line.starts_with("running  ")) running.push_back(line);
    // A log gets a line at most every 0.5 s of the 3 s the cell ran, and the cell was iterating.
    CHECK(!running.empty());
    CHECK(running.size() <= 7);
    CHECK(std::any_of(running.begin(), running.end(),
                      [](const std::string& line) { return line.find(": iteration ") != std::string::npos; }));
    CHECK(r.output.find("/1000000 (") != std::string::npos);
    const auto cells = read_cells(db);
    REQUIRE(cells.size() == 1);
    CHECK(cells.at(0).status == "timeout");
    CHECK_THAT(cells.at(0).reason, Catch::Matchers::StartsWith("no result within the cell's timeout of 3 s (it was at iteration "));
    CHECK_THAT(cells.at(0).reason, Catch::Matchers::EndsWith("/1000000); the cell process was killed"));
}

TEST_CASE("a cell process killed mid-way is failed with the iteration it was at", "[runner][progress]") {
    TempDir tmp;
    // A unique seed lets the test find this sweep's cell process among others.
    const std::string seed = own_seed(616161);
    write_file(tmp.file("m.toml"),
               "[defaults]\nmodel = \"tiny\"\nseq = 8\nseed = " + seed + "\nwarmups = 0\niterations = 1000000\n[[sweep]]\n");
    const auto db = tmp.file("m.db");
    const pid_t sweep = spawn_sweetspot({"run", tmp.file("m.toml"), "--db", db, "--timeout", "120s"});
    std::optional<pid_t> cell;
    REQUIRE(wait_until([&] { return (cell = cell_process_with("seed=" + seed)).has_value(); }, 30s));
    // A tiny cell is set up well within this, and its million iterations take far longer.
    std::this_thread::sleep_for(3s);
    kill(*cell, SIGKILL);
    int status = 0;
    REQUIRE(waitpid(sweep, &status, 0) == sweep);
    CHECK(WEXITSTATUS(status) == 1);
    const auto cells = read_cells(db);
    REQUIRE(cells.size() == 1);
    CHECK(cells.at(0).status == "failed");
    CHECK_THAT(cells.at(0).reason, Catch::Matchers::StartsWith("killed by signal 9 (Killed) during iteration "));
    CHECK_THAT(cells.at(0).reason, Catch::Matchers::EndsWith("/1000000"));
}

TEST_CASE("run refuses a --progress-every that is no duration", "[runner][progress]") {
    TempDir tmp;
    write_file(tmp.file("m.toml"), "[defaults]\nmodel = \"tiny\"\nseq = 8\n[[sweep]]\n");
    const auto db = tmp.file("m.db");
    const auto r = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "' --progress-every soon");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Matchers::ContainsSubstring("--progress-every expects a duration of at least 0.1 s"));
    CHECK_FALSE(std::filesystem::exists(db));
}

TEST_CASE("which cells may run side by side on several GPUs", "[runner]") {
    const auto cell = [](const char* axes) {
        return parse_matrix(std::string("[defaults]\nmodel = \"tiny\"\n") + axes + "\n[[sweep]]\n", "test").cells.at(0);
    };
    CHECK(sharing_of(cell("backend = \"host\""), false) == Sharing::alone);
    CHECK(sharing_of(cell("backend = \"device\""), false) == Sharing::beside_any);
    CHECK(sharing_of(cell("backend = \"explicit-copy\"\nbudget = \"100%\""), false) == Sharing::beside_any);
    CHECK(sharing_of(cell("backend = \"explicit-copy\"\nbudget = \"50%\""), false) == Sharing::link);
    CHECK(sharing_of(cell("backend = \"uvm\"\nbudget = \"50%\""), false) == Sharing::link);
    CHECK(sharing_of(cell("backend = \"uvm-prefetch\"\nbudget = \"50%\"\nprefetch = 1"), true) == Sharing::beside_any);
    CHECK(sharing_of(cell("backend = \"host\"\ndebug_fault = \"hang\""), false) == Sharing::beside_any);

    RunningCells running;
    CHECK(running.can_start(Sharing::alone));
    running.started(Sharing::link);
    CHECK_FALSE(running.can_start(Sharing::link));
    CHECK(running.can_start(Sharing::beside_any));
    CHECK_FALSE(running.can_start(Sharing::alone));
    running.started(Sharing::beside_any);
    running.finished(Sharing::link);
    CHECK(running.can_start(Sharing::link));
    CHECK_FALSE(running.can_start(Sharing::alone));
    running.finished(Sharing::beside_any);
    running.started(Sharing::alone);
    CHECK_FALSE(running.can_start(Sharing::beside_any));
    running.finished(Sharing::alone);
    CHECK(running.running() == 0);
}

TEST_CASE("a cell waits for the running cell that computes its host reference, not for others", "[runner]") {
    RunningCells running;
    running.started(Sharing::beside_any, "ref-a");
    running.started(Sharing::beside_any);  // reuses a kept reference, or needs none
    CHECK(running.computing("ref-a"));
    CHECK_FALSE(running.computing("ref-b"));
    CHECK_FALSE(running.computing(""));
    running.started(Sharing::link, "ref-a");  // two cells of one workload (a rerun, say)
    running.finished(Sharing::beside_any, "ref-a");
    CHECK(running.computing("ref-a"));
    running.finished(Sharing::link, "ref-a");
    CHECK_FALSE(running.computing("ref-a"));
    running.finished(Sharing::beside_any);
    CHECK(running.running() == 0);
}

TEST_CASE("run --gpus spreads cells over GPUs, each process told its own", "[runner]") {
    TempDir tmp;
    const auto db = tmp.file("g.db");
    // Four cells that hang until their 1 s timeout, which run beside each other: two GPUs take
    // about 2 s, one would take 4.
    write_file(tmp.file("m.toml"), "[defaults]\nmodel = \"tiny\"\nseq = 8\ntimeout = \"1s\"\ndebug_fault = \"hang\"\n"
                                   "[[sweep]]\nseed = [1, 2, 3, 4]\n");
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "' --gpus 7,3");
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO(r.output);
    CHECK(r.exit_code == 1);  // timeouts
    CHECK_THAT(r.output, Catch::Matchers::ContainsSubstring("2 GPUs (7, 3), one cell on each at a time"));
    CHECK(scalar(db, "SELECT count(*) FROM cells WHERE status = 'timeout'") == 4);
    CHECK(scalar(db, "SELECT count(DISTINCT cell_index) FROM cells") == 4);
    CHECK(scalar(db, "SELECT count(*) FROM cells WHERE gpu = '7'") + scalar(db, "SELECT count(*) FROM cells WHERE gpu = '3'") == 4);
    CHECK(scalar(db, "SELECT count(DISTINCT gpu) FROM cells") == 2);
    CHECK(wall < 3.8);

    // Real host cells run one at a time, each still told its GPU; without --gpus none is set.
    write_file(tmp.file("h.toml"), "[defaults]\nmodel = \"tiny\"\nseq = 8\niterations = 1\n[[sweep]]\nbatch = [1, 2, 3]\n");
    const auto h = run_sweetspot("run '" + tmp.file("h.toml") + "' --db '" + tmp.file("h.db") + "' --gpus 0,1");
    INFO(h.output);
    CHECK(h.exit_code == 0);
    CHECK(scalar(tmp.file("h.db"), "SELECT count(*) FROM cells WHERE status = 'ok' AND gpu IN ('0', '1')") == 3);
    REQUIRE(run_sweetspot("run '" + tmp.file("h.toml") + "' --db '" + tmp.file("plain.db") + "'").exit_code == 0);
    CHECK(scalar(tmp.file("plain.db"), "SELECT count(*) FROM cells WHERE gpu IS NULL") == 3);

    const auto bad = run_sweetspot("run '" + tmp.file("h.toml") + "' --db '" + tmp.file("x.db") + "' --gpus 0,0");
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.output, Catch::Matchers::ContainsSubstring("--gpus names GPU 0 twice"));
}

TEST_CASE("run --shard i/N: the shards' databases hold every cell exactly once", "[runner][shard]") {
    TempDir tmp;
    write_file(tmp.file("m.toml"), "[defaults]\nmodel = \"tiny\"\nseq = 8\niterations = 1\n[[sweep]]\nbatch = [1, 2, 3]\n"
                                   "seed = [1, 2]\n");
    std::set<std::string> keys;
    std::int64_t total = 0;
    for (const char* shard : {"1/3", "2/3", "3/3"}) {
        const auto db = tmp.file(std::string("s") + shard[0] + ".db");
        const auto r = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + db + "' --shard " + shard);
        INFO(r.output);
        REQUIRE(r.exit_code == 0);
        CHECK_THAT(r.output, Catch::Matchers::ContainsSubstring(std::string("shard ") + shard + ": 2 of 6 cells"));
        Database results(db, Database::Mode::read_only);
        auto st = results.prepare("SELECT cell_key FROM cells WHERE status = 'ok'");
        while (st.step()) {
            keys.insert(st.text(0));
            ++total;
        }
    }
    CHECK(total == 6);
    CHECK(keys.size() == 6);

    const auto listed = run_sweetspot("list '" + tmp.file("m.toml") + "' --shard 2/3");
    CHECK(listed.exit_code == 0);
    CHECK_THAT(listed.output, Catch::Matchers::ContainsSubstring("2 cells"));
    const auto bad = run_sweetspot("run '" + tmp.file("m.toml") + "' --shard 4/3");
    CHECK(bad.exit_code == 2);
    CHECK_THAT(bad.output, Catch::Matchers::ContainsSubstring("--shard expects i/N"));
}

TEST_CASE("submit --dry-run prints a job array of shards, and refuses what cannot be submitted", "[runner][slurm]") {
    TempDir tmp;
    write_file(tmp.file("m.toml"), "name = \"arr\"\n[defaults]\nmodel = \"tiny\"\nseq = 8\n[[sweep]]\nbatch = [1, 2, 3]\n");
    const auto r = run_sweetspot("submit '" + tmp.file("m.toml") + "' --dry-run --tasks 3 --array-parallelism 2 --time 2:00:00 "
                                 "--partition gpu --results '" + tmp.file("out") + "' --only batch=1,2,3 -- --mem=8G --qos=low");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    using Catch::Matchers::ContainsSubstring;
    for (const std::string line : {"#SBATCH --array=1-3%2", "#SBATCH --partition=gpu", "#SBATCH --time=2:00:00",
                                   "#SBATCH --signal=B:USR1@120", "#SBATCH --requeue", "#SBATCH --mem=8G", "#SBATCH --qos=low",
                                   "--shard \"$shard/3\"", "--only 'batch=1,2,3'", "scontrol requeue"})
        CHECK_THAT(r.output, ContainsSubstring(line));
    CHECK_THAT(r.output, !ContainsSubstring("--gpus-per-task"));  // host cells need no GPU
    CHECK_THAT(r.output, ContainsSubstring("/out/arr.shard-'\"$shard\"'-of-3.db"));
    CHECK_FALSE(std::filesystem::exists(tmp.file("out")));  // a dry run writes nothing
    write_file(tmp.file("script.sh"), r.output);
    CHECK(test::run_command("bash -n '" + tmp.file("script.sh") + "'").exit_code == 0);

    const auto too_many = run_sweetspot("submit '" + tmp.file("m.toml") + "' --dry-run --tasks 4");
    CHECK(too_many.exit_code == 2);
    CHECK_THAT(too_many.output, ContainsSubstring("--tasks expects 1 to 3"));
    const auto no_slurm = test::run_command("PATH=/nonexistent '" + test::sweetspot_binary() + "' submit '" + tmp.file("m.toml") + "'");
    CHECK(no_slurm.exit_code == 2);
    CHECK_THAT(no_slurm.output, ContainsSubstring("sbatch is not on PATH"));
}

TEST_CASE("submit refuses a control character in anything its batch script would hold, naming where it came from",
          "[runner][slurm]") {
    TempDir tmp;
    const std::string matrix = "name = \"arr\"\n[defaults]\nmodel = \"tiny\"\nseq = 8\n[[sweep]]\nbatch = [1, 2]\n";
    write_file(tmp.file("m.toml"), matrix);
    write_file(tmp.file("m\nx.toml"), matrix);
    const std::string m = sh_word(tmp.file("m.toml"));
    struct Case {
        std::string args, names, shows;
    };
    // A line break in a comment or an #SBATCH line of the script would run what follows it in
    // every array task, and end the #SBATCH lines that sbatch reads.
    const std::vector<Case> cases = {
        {m + " --results " + sh_word(tmp.file("dir\ntouch PWNED\n#")), "--results", "dir\\ntouch PWNED\\n#"},
        {m + " --partition " + sh_word("gpu\ntouch PWNED"), "--partition", "'gpu\\ntouch PWNED'"},
        {m + " --time " + sh_word("1:00:00\r"), "--time", "'1:00:00\\r'"},
        {m + " -- --mem=8G " + sh_word("--comment=a\x7f" "b"), "sbatch option after --", "'--comment=a\\x7fb'"},
        {m + " --set " + sh_word("batch=1\t"), "--set", "'batch=1\\t'"},
        {sh_word(tmp.file("m\nx.toml")), "FILE", "m\\nx.toml"},
    };
    for (const Case& c : cases) {
        const auto r = run_sweetspot("submit --dry-run " + c.args);
        INFO(r.output);
        CHECK(r.exit_code == 2);
        CHECK_THAT(r.output, Catch::Matchers::ContainsSubstring(c.names));
        CHECK_THAT(r.output, Catch::Matchers::ContainsSubstring(c.shows));
        CHECK_THAT(r.output, Catch::Matchers::ContainsSubstring("control character"));
        CHECK_THAT(r.output, !Catch::Matchers::ContainsSubstring("#!/bin/bash"));
    }

    // Submitted for real, nothing is written and sbatch is not run.
    const std::string fake_bin = tmp.file("bin");
    std::filesystem::create_directories(fake_bin);
    write_file(fake_bin + "/sbatch", "#!/bin/sh\necho \"$@\" > '" + tmp.file("sbatch.args") + "'\necho 77\n");
    std::filesystem::permissions(fake_bin + "/sbatch", std::filesystem::perms::owner_all);
    const std::string results = tmp.file("res\ntouch PWNED\n#");
    const auto submitted = test::run_command("cd " + sh_word(tmp.file("")) + " && PATH=" + sh_word(fake_bin) + ":\"$PATH\" " +
                                             sh_word(test::sweetspot_binary()) + " submit " + m + " --results " + sh_word(results));
    INFO(submitted.output);
    CHECK(submitted.exit_code == 2);
    CHECK_FALSE(std::filesystem::exists(tmp.file("sbatch.args")));
    CHECK_FALSE(std::filesystem::exists(results));
    CHECK_FALSE(std::filesystem::exists(tmp.file("PWNED")));
}

TEST_CASE("submit's batch script holds hostile names as whole quoted words: the task runs the sweep and nothing else, "
          "sbatch reads each option whole", "[runner][slurm]") {
    TempDir tmp;
    const std::string hostile = "it's $(touch PWNED) `touch PWNED`; touch PWNED & \"q\" #x 100%j";
    const std::string in = tmp.file("in " + hostile), results = tmp.file("out " + hostile);
    std::filesystem::create_directories(in);
    const std::string matrix = in + "/m " + hostile + ".toml";
    write_file(matrix, "name = \"arr\"\n[defaults]\nmodel = \"tiny\"\nseq = 8\nwarmups = 0\niterations = 1\n");
    const std::string partition = "gpu " + hostile + " \\b", time = "1:00:00 " + hostile, extra = "--comment=" + hostile + " \\b";
    const auto r = run_sweetspot("submit " + sh_word(matrix) + " --dry-run --partition " + sh_word(partition) + " --time " +
                                 sh_word(time) + " --results " + sh_word(results) + " --set " + sh_word("batch=1") + " -- " +
                                 sh_word(extra));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);

    // Slurm reads "%%" in a file name as one '%', and %A and %a as the job and the task.
    std::string output = "--output=";
    for (const char c : results) output += c == '%' ? std::string("%%") : std::string(1, c);
    std::vector<std::string> expected = {"--job-name=sweetspot-arr", "--array=1-1", "--ntasks=1", output + "/slurm-%A_%a.out",
                                         "--open-mode=append", "--signal=B:USR1@120", "--requeue", "--partition=" + partition,
                                         "--time=" + time, extra};
    std::vector<std::string> read = sbatch_words(r.output);
    std::sort(expected.begin(), expected.end());
    std::sort(read.begin(), read.end());
    CHECK(read == expected);

    // Run as Slurm runs an array task, from a folder of its own: the shard is measured and copied
    // back, and no word of a name ran as a command.
    const std::string script = tmp.file("task.sh"), work = tmp.file("work");
    write_file(script, r.output);
    CHECK(test::run_command("bash -n " + sh_word(script)).exit_code == 0);
    std::filesystem::create_directories(results);
    std::filesystem::create_directories(work);
    const auto task = test::run_command("cd " + sh_word(work) + " && SLURM_ARRAY_JOB_ID=77 SLURM_ARRAY_TASK_ID=1 TMPDIR=" +
                                        sh_word(tmp.file("")) + " bash " + sh_word(script));
    INFO(task.output);
    CHECK(task.exit_code == 0);
    const std::string shard = results + "/arr.shard-1-of-1.db";
    REQUIRE(std::filesystem::exists(shard));
    CHECK(scalar(shard, "SELECT count(*) FROM cells WHERE status = 'ok' AND batch = 1") == 1);
    for (const auto& entry : std::filesystem::recursive_directory_iterator(tmp.file("")))
        CHECK(entry.path().filename() != "PWNED");

    // A backslash in --output would make Slurm expand none of its %A and %a: every task would
    // write one file, named without the backslash.
    const auto backslash = run_sweetspot("submit " + sh_word(matrix) + " --dry-run --results " + sh_word(tmp.file("a\\b")));
    CHECK(backslash.exit_code == 2);
    CHECK_THAT(backslash.output, Catch::Matchers::ContainsSubstring("--results"));
    CHECK_THAT(backslash.output, Catch::Matchers::ContainsSubstring("backslash"));
    // sbatch reads an #SBATCH line holding "hetjob" anywhere as the start of a heterogeneous
    // job's next part, which an array cannot have.
    const auto hetjob = run_sweetspot("submit " + sh_word(matrix) + " --dry-run --partition big-HetJob-nodes");
    CHECK(hetjob.exit_code == 2);
    CHECK_THAT(hetjob.output, Catch::Matchers::ContainsSubstring("--partition 'big-HetJob-nodes' holds 'hetjob'"));
}

TEST_CASE("submit's batch script as Slurm runs it: shards copied back, stopped and requeued, resumed", "[runner][slurm]") {
    TempDir tmp;
    const auto read_text = [](const std::string& file) {
        std::ifstream f(file);
        return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    };
    const std::string fake_bin = tmp.file("bin");
    std::filesystem::create_directories(fake_bin);
    // Stand-ins for sbatch (prints a job id as --parsable does) and scontrol (logs its arguments).
    write_file(fake_bin + "/sbatch", "#!/bin/sh\necho \"$@\" > '" + tmp.file("sbatch.args") + "'\necho 77\n");
    write_file(fake_bin + "/scontrol", "#!/bin/sh\necho \"$@\" >> '" + tmp.file("scontrol.log") + "'\n");
    for (const char* tool : {"sbatch", "scontrol"}) std::filesystem::permissions(fake_bin + "/" + tool, std::filesystem::perms::owner_all);
    const auto matrix = tmp.file("m.toml");
    const std::string ok_cells = "[defaults]\nmodel = \"tiny\"\nseq = 8\niterations = 1\n[[sweep]]\nname = \"ok\"\nseed = [1, 2]\n";
    // Shard 1 of 1: two cells, then one that hangs (its own seed) until the task is warned.
    const std::string seed = own_seed(717171);
    write_file(matrix, "name = \"req\"\n" + ok_cells + "[[sweep]]\nname = \"hang\"\nseed = " + seed + "\ndebug_fault = \"hang\"\ntimeout = \"60s\"\n");
    const std::string path = "PATH='" + fake_bin + "':\"$PATH\" ";
    const auto submitted = test::run_command(path + "'" + test::sweetspot_binary() + "' submit '" + matrix + "' --tasks 1 --results '" +
                                             tmp.file("res") + "'");
    INFO(submitted.output);
    REQUIRE(submitted.exit_code == 0);
    CHECK_THAT(submitted.output, Catch::Matchers::ContainsSubstring("submitted job array 77"));
    const std::string script = tmp.file("res") + "/req.sbatch";
    REQUIRE(std::filesystem::exists(script));
    const std::string final_db = tmp.file("res") + "/req.shard-1-of-1.db";

    // The array task, as Slurm would start it, in the background; then the warning before its limit.
    const std::string task_env = path + "SLURM_ARRAY_JOB_ID=77 SLURM_ARRAY_TASK_ID=1 TMPDIR='" + tmp.file("") + "' ";
    const auto started = test::run_command(task_env + "bash '" + script + "' > '" + tmp.file("task1.out") + "' 2>&1 & echo $!");
    const pid_t task = static_cast<pid_t>(std::stol(started.output));
    REQUIRE(wait_until([&] { return process_running_with("seed=" + seed); }, 30s));
    ::kill(task, SIGUSR1);
    REQUIRE(wait_until([&] { return ::kill(task, 0) != 0; }, 30s));
    INFO(read_text(tmp.file("task1.out")));
    CHECK(read_text(tmp.file("scontrol.log")) == "requeue 77_1\n");
    REQUIRE(std::filesystem::exists(final_db));
    CHECK(scalar(final_db, "SELECT count(*) FROM cells WHERE status = 'ok'") == 2);
    CHECK(scalar(final_db, "SELECT count(*) FROM cells WHERE seed = " + seed) == 0);  // abandoned, not recorded

    // Requeued (the hanging cell now times out at once: the timeout is not part of its key): the
    // task resumes from the copy and measures only what is missing.
    write_file(matrix, "name = \"req\"\n" + ok_cells + "[[sweep]]\nname = \"hang\"\nseed = " + seed + "\ndebug_fault = \"hang\"\ntimeout = \"1s\"\n");
    const auto again = test::run_command(task_env + "bash '" + script + "'");
    INFO(again.output);
    CHECK(again.exit_code == 1);  // the cell that timed out
    CHECK_THAT(again.output, Catch::Matchers::ContainsSubstring("2 already done"));
    CHECK(scalar(final_db, "SELECT count(*) FROM cells") == 3);
    CHECK(scalar(final_db, "SELECT count(*) FROM cells WHERE status = 'timeout'") == 1);
}

TEST_CASE("the bandwidth of memory the caller holds, read and written in place, leaves every bit as it was",
          "[runner][bandwidth]") {
    // Two groups of unequal length; values a float's arithmetic would change: both zeros, a
    // subnormal, infinities, NaNs with payloads, and a pattern through every bit.
    const std::vector<std::uint32_t> special = {0x00000000u, 0x80000000u, 0x00000001u, 0x7f800000u,
                                                0xff800000u, 0x7fc00001u, 0xffbfffffu, 0x3f800000u};
    const auto filled = [&](std::size_t n, std::uint32_t salt) {
        std::vector<float> v(n);
        for (std::size_t i = 0; i < n; ++i) {
            const auto pattern = static_cast<std::uint32_t>(i * 2654435761u) ^ salt;
            v[i] = std::bit_cast<float>(i < special.size() ? special[i] : pattern);
        }
        return v;
    };
    const std::size_t n0 = (std::size_t{1} << 20) + 5, n1 = 999;
    std::vector<std::vector<float>> arrays = {filled(n0, 1), filled(n0, 2), filled(n0, 3),
                                              filled(n1, 4), filled(n1, 5), filled(n1, 6)};
    const std::vector<std::vector<float>> before = arrays;
    // The second group's gradient and weights in bf16's width, the first's in fp32's (the bits of
    // floats, which the pass treats as words all the same).
    const std::vector<float> gradient32 = filled(n0, 7), weights32_before = filled(n0, 8);
    std::vector<float> weights32 = weights32_before;
    std::vector<std::uint16_t> gradient16(n1), weights16(n1);
    for (std::size_t i = 0; i < n1; ++i) {
        gradient16[i] = static_cast<std::uint16_t>(i * 40503u);
        weights16[i] = static_cast<std::uint16_t>(0xffffu - i * 7u);
    }
    const std::vector<std::uint16_t> weights16_before = weights16;
    const std::vector<UpdateArrays> state = {
        {.state = {arrays[0].data(), arrays[1].data(), arrays[2].data()}, .n = static_cast<std::int64_t>(n0)},
        {.state = {arrays[3].data(), arrays[4].data(), arrays[5].data()}, .n = static_cast<std::int64_t>(n1)}};
    std::vector<UpdateArrays> update = state;
    update[0].gradient = gradient32.data();
    update[0].weights = weights32.data();
    update[0].dtype_bytes = 4;
    update[1].gradient = gradient16.data();
    update[1].weights = weights16.data();
    update[1].dtype_bytes = 2;
    const MemoryBandwidth rate = measure_in_place_bandwidth(state, 2);
    CHECK(rate.bytes == 3 * 8 * static_cast<std::int64_t>(n0 + n1));  // 3 arrays, 4 bytes read and 4 written
    CHECK(rate.passes == 2);
    CHECK(rate.gbps > 0);
    // As the update moves them: 24 bytes of state, the gradient read and the weights read and
    // written, 36 bytes an element in fp32 and 30 in bf16.
    const MemoryBandwidth all = measure_in_place_bandwidth(update, 1);
    CHECK(all.bytes == 36 * static_cast<std::int64_t>(n0) + 30 * static_cast<std::int64_t>(n1));
    CHECK(all.gbps > 0);
    for (std::size_t a = 0; a < arrays.size(); ++a) {
        INFO("array " << a);
        CHECK(std::memcmp(arrays[a].data(), before[a].data(), arrays[a].size() * sizeof(float)) == 0);
    }
    CHECK(std::memcmp(weights32.data(), weights32_before.data(), n0 * sizeof(float)) == 0);
    CHECK(weights16 == weights16_before);
    CHECK_THROWS_AS(measure_in_place_bandwidth({}, 1), std::invalid_argument);
    CHECK_THROWS_AS(measure_in_place_bandwidth(state, 0), std::invalid_argument);
    update[1].dtype_bytes = 1;
    CHECK_THROWS_AS(measure_in_place_bandwidth(update, 1), std::invalid_argument);
}

TEST_CASE("the host's memory bandwidth: a triad and the update's streams over every core, measured for the cells "
          "whose update it bounds", "[runner][bandwidth]") {
    const MemoryBandwidth small = measure_host_memory_bandwidth(std::int64_t{1} << 20, 3);
    CHECK(small.bytes == 3 * (std::int64_t{1} << 20) * 4);  // two arrays read, one written, 4 bytes a float
    CHECK(small.passes == 3);
    CHECK(small.gbps > 0);
    CHECK_THROWS_AS(measure_host_memory_bandwidth(0, 1), std::invalid_argument);
    CHECK_THROWS_AS(measure_host_memory_bandwidth(1, 0), std::invalid_argument);
    // 2 bytes of gradient read, 3 × 4 read and written, 2 of weights written and read first.
    const MemoryBandwidth update = measure_host_update_bandwidth((std::int64_t{1} << 20) + 3, 2);
    CHECK(update.bytes == ((std::int64_t{1} << 20) + 3) * (2 + 3 * 8 + 2 + 2));
    CHECK(update.passes == 2);
    CHECK(update.gbps > 0);
    CHECK_THROWS_AS(measure_host_update_bandwidth(0, 1), std::invalid_argument);
    CHECK_THROWS_AS(measure_host_update_bandwidth(1, 0), std::invalid_argument);

    // Measured where a GPU training cell updates on the host, and said; not for any other matrix.
    const auto matrix_of = [](const std::string& defaults) {
        return parse_matrix("[defaults]\n" + defaults + "\n[[sweep]]\n", "inline.toml");
    };
    std::ostringstream said;
    // Arrays of 16 Mi floats and 8 Mi elements (128 MiB).
    const HostMemoryProbeSizes sizes{std::int64_t{16} << 20, std::int64_t{8} << 20};
    const auto measured = host_memory_for_sweep(
        matrix_of("model = \"tiny\"\nbackend = \"device\"\nmode = \"train\"\noptimizer = \"host\""), said, sizes);
    REQUIRE(measured);
    CHECK(measured->triad_gbps > 0);
    CHECK(measured->update_gbps > 0);
    CHECK_THAT(said.str(), Catch::Matchers::StartsWith("sweetspot: host memory "));
    CHECK_THAT(said.str(), Catch::Matchers::ContainsSubstring("STREAM triad over 3 × 64.0 MiB, best of 5 passes"));
    CHECK_THAT(said.str(), Catch::Matchers::ContainsSubstring("the host update's own streams (over 128.0 MiB, best of 10"));
    for (const char* other : {"model = \"tiny\"\nbackend = \"device\"\nmode = \"train\"",
                              "model = \"tiny\"\nbackend = \"host\"\nmode = \"train\"",
                              "model = \"tiny\"\nbackend = \"device\""}) {
        INFO(other);
        std::ostringstream quiet;
        CHECK_FALSE(host_memory_for_sweep(matrix_of(other), quiet, sizes));
        CHECK(quiet.str().empty());
    }

    // A small host's probes fit a quarter of its free memory: 4 GiB leaves 1 GiB, 89,478,485 triad
    // floats (12 bytes each: no fewer than the default 64 Mi) and 64 Mi update elements (16 bytes).
    const HostMemoryProbeSizes defaults;
    const HostMemoryProbeSizes small_host = defaults.within(std::int64_t{4} << 30);
    CHECK(small_host.triad_floats == std::int64_t{64} << 20);
    CHECK(small_host.update_elements == std::int64_t{64} << 20);
    const HostMemoryProbeSizes tiny_host = defaults.within(std::int64_t{192} << 20);  // 48 MiB each
    CHECK(tiny_host.triad_floats == (std::int64_t{48} << 20) / 12);
    CHECK(tiny_host.update_elements == std::int64_t{3} << 20);
    for (const auto large : {std::optional<std::int64_t>{}, std::optional<std::int64_t>{std::int64_t{1} << 40}}) {
        const HostMemoryProbeSizes kept = defaults.within(large);
        CHECK(kept.triad_floats == std::int64_t{64} << 20);
        CHECK(kept.update_elements == std::int64_t{256} << 20);
    }
    CHECK(defaults.within(0).update_elements == 1);

    // Stored with the run.
    test::TempDir tmp;
    auto store = Store::open(tmp.file("r.db"), Store::Access::exclusive);
    RunInfo info;
    info.started_at = "2026-11-26T10:00:00Z";
    info.host_memory_gbps = 12.5;
    info.host_update_gbps = 15.25;
    store.begin_run(info);
    CHECK(scalar_text(tmp.file("r.db"), "SELECT host_memory_gbps FROM runs") == "12.5");
    CHECK(scalar_text(tmp.file("r.db"), "SELECT host_update_gbps FROM runs") == "15.25");
}
