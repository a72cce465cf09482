// A refused command leaves every file byte for byte as it was and creates none; two sweeps never
// write one database at once; what a killed sweep leaves behind is cleaned by the next one.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include "harness/system/file_lock.hpp"
#include "harness/store/sqlite.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;
using test::read_bytes;
using test::run_sweetspot;
using test::TempDir;
using test::write_file;
using test::fill_fixture;
using test::ok_outcome;
using test::sample_run;
using test::tiny_cell;

namespace {

std::string quoted(const std::string& path) { return "'" + path + "'"; }

constexpr const char* kTinyMatrix = "[defaults]\nmodel = \"tiny\"\nseq = 8\niterations = 1\n";

// A results database with one ok host cell.
void make_results_db(const TempDir& tmp, const std::string& db) {
    write_file(tmp.file("ok.toml"), kTinyMatrix);
    const auto r = run_sweetspot("run " + quoted(tmp.file("ok.toml")) + " --db " + quoted(db));
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
}

}  // namespace

TEST_CASE("run refuses a database that is not its own without changing a byte of it", "[cli][refusal]") {
    TempDir tmp;
    write_file(tmp.file("m.toml"), kTinyMatrix);
    // `run` into `db` exits 2 saying `says`, and the file is byte for byte what it was.
    const auto refused_unchanged = [&](const std::string& db, const std::string& says) {
        const auto before = read_bytes(db);
        const auto r = run_sweetspot("run " + quoted(tmp.file("m.toml")) + " --db " + quoted(db));
        CHECK(r.exit_code == 2);
        CHECK_THAT(r.output, ContainsSubstring(says));
        CHECK(read_bytes(db) == before);  // the journal mode byte of the header too
    };

    SECTION("an SQLite database of another program") {
        {
            Database other(tmp.file("other.db"), Database::Mode::read_write_create);
            other.exec("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes (text) VALUES ('keep me')");
        }
        refused_unchanged(tmp.file("other.db"), "is an SQLite database but not a sweetspot results database");
        CHECK_FALSE(std::filesystem::exists(tmp.file("other.db-wal")));
    }
    SECTION("a results database of an unknown schema version") {
        make_results_db(tmp, tmp.file("future.db"));
        {
            Database db(tmp.file("future.db"), Database::Mode::read_write);
            db.exec("UPDATE schema_info SET version = 99");
        }
        refused_unchanged(tmp.file("future.db"), "schema version 99");
    }
    SECTION("a file that is not SQLite at all, named in the message") {
        write_file(tmp.file("junk.db"), std::string(3000, 'j'));
        refused_unchanged(tmp.file("junk.db"), tmp.file("junk.db"));
        CHECK(read_bytes(tmp.file("junk.db")) == std::string(3000, 'j'));
        const auto s = run_sweetspot("summary " + quoted(tmp.file("junk.db")));
        CHECK(s.exit_code == 2);
        CHECK_THAT(s.output, ContainsSubstring(tmp.file("junk.db")));
    }
}

TEST_CASE("trace and logits write their output only when they succeed", "[cli][refusal]") {
    TempDir tmp;
    const auto db = tmp.file("r.db");
    make_results_db(tmp, db);

    write_file(tmp.file("keep.json"), "precious");
    const auto kept = run_sweetspot("trace " + quoted(db) + " --cell 424242 -o " + quoted(tmp.file("keep.json")));
    CHECK(kept.exit_code == 2);
    CHECK(read_bytes(tmp.file("keep.json")) == "precious");
    const auto none = run_sweetspot("trace " + quoted(db) + " --cell 424242 -o " + quoted(tmp.file("new.json")));
    CHECK(none.exit_code == 2);
    CHECK_FALSE(std::filesystem::exists(tmp.file("new.json")));

    write_file(tmp.file("keep.npy"), "precious");
    const auto bad_token = run_sweetspot("logits --model tiny --tokens 1,2,99999 -o " + quoted(tmp.file("keep.npy")));
    CHECK(bad_token.exit_code == 2);
    CHECK(read_bytes(tmp.file("keep.npy")) == "precious");
    const auto too_many = run_sweetspot("logits --model tiny --batch 100000 --seq 100 -o " + quoted(tmp.file("keep.npy")));
    CHECK(too_many.exit_code == 2);
    CHECK_THAT(too_many.output, ContainsSubstring("more than the 1048576 tokens a forward may have"));
    CHECK(read_bytes(tmp.file("keep.npy")) == "precious");
    const auto bad_variant = run_sweetspot("logits --model tiny --variant fastest -o " + quoted(tmp.file("keep.npy")));
    CHECK(bad_variant.exit_code == 2);
    CHECK_THAT(bad_variant.output, ContainsSubstring("--variant expects a preset (baseline, "));
    const auto host_fusion =
        run_sweetspot("logits --model tiny --variant flash_attention -o " + quoted(tmp.file("keep.npy")));
    CHECK(host_fusion.exit_code == 2);
    CHECK_THAT(host_fusion.output, ContainsSubstring("the host backend runs the baseline variant only"));
    CHECK(read_bytes(tmp.file("keep.npy")) == "precious");
    const auto written = run_sweetspot("logits --model tiny --seq 4 -o " + quoted(tmp.file("keep.npy")));
    CHECK(written.exit_code == 0);
    CHECK(read_bytes(tmp.file("keep.npy")).starts_with("\x93NUMPY"));

    // No temporary file is left behind by either outcome.
    for (const auto& e : std::filesystem::directory_iterator(tmp.file(""))) {
        INFO(e.path());
        CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
    }
}

TEST_CASE("a second sweep on a database another sweep is writing is refused", "[cli][refusal]") {
    TempDir tmp;
    const auto db = tmp.file("r.db");
    make_results_db(tmp, db);
    write_file(tmp.file("slow.toml"), std::string(kTinyMatrix) + "debug_fault = \"hang\"\ntimeout = 20\n");

    const pid_t first = fork();
    REQUIRE(first >= 0);
    if (first == 0) {
        const std::string bin = test::sweetspot_binary(), matrix = tmp.file("slow.toml");
        std::freopen("/dev/null", "w", stderr);
        execl(bin.c_str(), bin.c_str(), "run", matrix.c_str(), "--db", db.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    // Wait until the first sweep has its cell running, which is after it took the database.
    bool running = false;
    for (int i = 0; i < 200 && !running; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        Database probe(db, Database::Mode::read_only);
        auto st = probe.prepare("SELECT count(*) FROM runs WHERE status = 'running'");
        running = st.step() && st.int64(0) > 0;
    }
    CHECK(running);
    write_file(tmp.file("m.toml"), kTinyMatrix);
    const auto second = run_sweetspot("run " + quoted(tmp.file("m.toml")) + " --db " + quoted(db) + " --rerun");
    kill(first, SIGINT);
    int status = 0;
    waitpid(first, &status, 0);
    INFO(second.output);
    CHECK(second.exit_code == 2);
    CHECK_THAT(second.output, ContainsSubstring("is being written by another sweetspot run"));

    // Once the first sweep is gone, the database is free again.
    CHECK(run_sweetspot("run " + quoted(tmp.file("m.toml")) + " --db " + quoted(db)).exit_code == 0);
}

TEST_CASE("a sweep removes the scratch folders of killed sweeps, and only those", "[cli][runner]") {
    TempDir tmp, scratch_root;
    const auto abandoned = scratch_root.file("sweetspot-Abandn"), alive = scratch_root.file("sweetspot-Alive1"),
               foreign = scratch_root.file("sweetspot-nolock");
    for (const auto& dir : {abandoned, alive, foreign}) std::filesystem::create_directory(dir);
    write_file(abandoned + "/lock", "");
    write_file(abandoned + "/cell.log", "left by a killed sweep");
    write_file(alive + "/lock", "");
    write_file(foreign + "/cell.log", "not made by this version");
    const auto held = FileLock::try_lock(alive + "/lock");  // a sweep that is still running
    REQUIRE(held);

    write_file(tmp.file("m.toml"), kTinyMatrix);
    const auto r = test::run_command("TMPDIR=" + quoted(scratch_root.file("")) + " '" + test::sweetspot_binary() +
                                     "' run " + quoted(tmp.file("m.toml")) + " --db " + quoted(tmp.file("r.db")));
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_FALSE(std::filesystem::exists(abandoned));
    CHECK(std::filesystem::exists(alive));
    CHECK(std::filesystem::exists(foreign));
    int left = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(scratch_root.file(""))) ++left;
    CHECK(left == 2);  // the run's own scratch folder is gone too
}

TEST_CASE("--timeout is stored with the cells it bounded, and must leave a cell time to start", "[cli][runner]") {
    TempDir tmp;
    write_file(tmp.file("m.toml"), std::string(kTinyMatrix) + "timeout = \"10m\"\n");
    const auto db = tmp.file("r.db");
    const auto r = run_sweetspot("run " + quoted(tmp.file("m.toml")) + " --db " + quoted(db) + " --timeout 90s");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    Database results(db, Database::Mode::read_only);
    auto st = results.prepare("SELECT timeout_s FROM cells");
    REQUIRE(st.step());
    CHECK(st.real(0) == 90.0);

    for (const char* tiny : {"0", "0.0001", "0.5s"}) {
        INFO(tiny);
        const auto refused = run_sweetspot("run " + quoted(tmp.file("m.toml")) + " --db " + quoted(tmp.file("x.db")) +
                                           " --timeout " + tiny);
        CHECK(refused.exit_code == 2);
        CHECK_THAT(refused.output, ContainsSubstring("at least 1 s"));
        CHECK_FALSE(std::filesystem::exists(tmp.file("x.db")));
    }
}

TEST_CASE("summary reads a WAL database in a folder it cannot write", "[cli]") {
    TempDir tmp;
    const auto dir = tmp.file("ro");
    std::filesystem::create_directory(dir);
    const auto db = dir + "/r.db";
    make_results_db(tmp, db);
    // Root may write anywhere, so as root the reader runs as nobody; otherwise the folder is
    // made read-only.
    std::string as_reader;
    if (geteuid() == 0) {
        as_reader = "setpriv --reuid=65534 --regid=65534 --clear-groups ";
        std::filesystem::permissions(tmp.file(""), std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                                       std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                                                       std::filesystem::perms::others_exec);
    }
    std::filesystem::permissions(dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec |
                                          std::filesystem::perms::group_read | std::filesystem::perms::group_exec |
                                          std::filesystem::perms::others_read | std::filesystem::perms::others_exec);
    std::filesystem::permissions(db, std::filesystem::perms::owner_read | std::filesystem::perms::group_read |
                                         std::filesystem::perms::others_read);
    const auto r = test::run_command(as_reader + "'" + test::sweetspot_binary() + "' summary " + quoted(db));
    std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.output, ContainsSubstring("1 ok"));
}

TEST_CASE("the commands that only read a database leave no -wal or -shm file beside it and change none of its bytes",
          "[cli][store]") {
    TempDir tmp;
    const auto db = tmp.file("r.db");
    {
        auto s = Store::open(db);
        fill_fixture(s);  // cells 1 and 2 traced
    }
    write_file(tmp.file("m.toml"), kTinyMatrix);
    REQUIRE_FALSE(std::filesystem::exists(db + "-wal"));
    const std::string before = read_bytes(db);
    for (const std::string& command :
         {"summary " + quoted(db), "summary " + quoted(db) + " --cell 1", "summary " + quoted(db) + " --history --format json",
          "compare " + quoted(db) + " " + quoted(db + "@1"), "trace " + quoted(db) + " --cell 1 -o " + quoted(tmp.file("t.json")),
          "list " + quoted(tmp.file("m.toml")) + " --calibration " + quoted(db),
          "estimate " + quoted(tmp.file("m.toml")) + " --calibration " + quoted(db)}) {
        const auto r = run_sweetspot(command);
        INFO(command << ": " << r.output);
        CHECK(r.exit_code != 1);  // list and estimate refuse (2) a database without a GPU cell, once they read it
        CHECK_FALSE(std::filesystem::exists(db + "-wal"));
        CHECK_FALSE(std::filesystem::exists(db + "-shm"));
        const bool unchanged = read_bytes(db) == before;
        CHECK(unchanged);
    }
}

TEST_CASE("summary reads what a sweep that is still writing has committed, whether or not its -wal file holds it", "[cli][store]") {
    TempDir tmp;
    const auto db = tmp.file("r.db");
    auto writer = Store::open(db);
    const auto run = writer.begin_run(sample_run());
    record_outcome(writer, run, 0, tiny_cell(1, 8), ok_outcome(1.0));
    REQUIRE(std::filesystem::file_size(db + "-wal") > 0);
    const auto first = run_sweetspot("summary " + quoted(db));
    INFO(first.output);
    CHECK(first.exit_code == 0);
    CHECK_THAT(first.output, ContainsSubstring("1 ok"));
    writer.db().exec("PRAGMA wal_checkpoint(TRUNCATE)");
    REQUIRE(std::filesystem::file_size(db + "-wal") == 0);
    const auto checkpointed = run_sweetspot("summary " + quoted(db));
    CHECK_THAT(checkpointed.output, ContainsSubstring("1 ok"));
    // The writer goes on after the readers, and they see it.
    record_outcome(writer, run, 1, tiny_cell(2, 8), ok_outcome(2.0));
    const auto second = run_sweetspot("summary " + quoted(db));
    INFO(second.output);
    CHECK_THAT(second.output, ContainsSubstring("2 ok"));
}

TEST_CASE("report -o onto a file is refused before anything is drawn; summary of a matrix names what it is", "[cli][refusal]") {
    TempDir tmp;
    const auto db = tmp.file("r.db");
    {
        auto s = Store::open(db);
        fill_fixture(s);
    }
    write_file(tmp.file("figures"), "precious");
    const auto r = run_sweetspot("report " + quoted(db) + " -o " + quoted(tmp.file("figures")));
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, ContainsSubstring(tmp.file("figures") + " is a file, not a folder"));
    CHECK_THAT(r.output, !ContainsSubstring("Errno") && !ContainsSubstring(".png"));  // no figure drawn first
    CHECK(read_bytes(tmp.file("figures")) == "precious");
    std::size_t entries = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(tmp.file(""))) ++entries;
    CHECK(entries == 2);  // r.db and figures: no staging folder left beside them

    write_file(tmp.file("m.toml"), kTinyMatrix);
    const auto toml = run_sweetspot("summary " + quoted(tmp.file("m.toml")));
    INFO(toml.output);
    CHECK(toml.exit_code == 2);
    CHECK_THAT(toml.output, ContainsSubstring(tmp.file("m.toml") + " is not an SQLite database"));
    CHECK_THAT(toml.output, !ContainsSubstring("SELECT") && !ContainsSubstring("prepare"));
}
