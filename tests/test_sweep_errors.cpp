// What a sweep does when its results database cannot be written: a column missing, a disk that
// fills, a file system made read-only, a damaged page, a lock another connection holds too long, a
// run a killed sweep left open. Every case ends with a message, the run closed where the database
// still takes it, the cells stored before intact, and a sweep the same command resumes; none
// aborts the process. End to end through the sweetspot binary.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "harness/store/sqlite.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using namespace std::chrono_literals;
using Catch::Matchers::ContainsSubstring;
using test::TempDir;

namespace {

// `cells` host cells of the tiny model, each `iterations` timed iterations long (a row each in
// `iterations`: what makes the database grow).
std::string matrix_text(int cells, int iterations) {
    std::string batches;
    for (int b = 1; b <= cells; ++b) batches += (b > 1 ? ", " : "") + std::to_string(b);
    return "name = \"errors\"\n[defaults]\nbackend = \"host\"\nmodel = \"tiny\"\nseq = 8\nwarmups = 0\nmax_noise = 0\n"
           "iterations = " + std::to_string(iterations) + "\n[[sweep]]\nname = \"s\"\nbatch = [" + batches + "]\n";
}

std::int64_t scalar(const std::string& db_path, const std::string& sql) {
    Database db(db_path, Database::Mode::read_only);
    auto st = db.prepare(sql);
    return st.step() ? st.int64(0) : -1;
}

std::string text_of(const std::string& db_path, const std::string& sql) {
    Database db(db_path, Database::Mode::read_only);
    auto st = db.prepare(sql);
    return st.step() ? st.text(0) : "";
}

// A tmpfs of a few hundred kB on a folder of its own, unmounted at the end: a disk that fills under
// a sweep. Mounting needs root (CAP_SYS_ADMIN); without, the test skips.
class SmallDisk {
public:
    SmallDisk(std::string folder, const std::string& size) : folder_(std::move(folder)) {
        std::filesystem::create_directories(folder_);
        mounted_ = ::mount("tmpfs", folder_.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
        if (!mounted_) why_ = std::strerror(errno);
    }
    ~SmallDisk() {
        if (mounted_) ::umount2(folder_.c_str(), MNT_DETACH);
    }
    SmallDisk(const SmallDisk&) = delete;
    SmallDisk& operator=(const SmallDisk&) = delete;
    bool mounted() const { return mounted_; }
    const std::string& why_not() const { return why_; }
    std::string file(const std::string& name) const { return folder_ + "/" + name; }
    void grow(const std::string& size) {
        REQUIRE(::mount("tmpfs", folder_.c_str(), "tmpfs", MS_REMOUNT, ("size=" + size).c_str()) == 0);
    }

private:
    std::string folder_, why_;
    bool mounted_ = false;
};

// An ext4 file system in an image file, mounted through a loop device with errors=remount-ro, as
// a data disk is: an error the kernel finds turns it read-only under the files open on it, which
// is how a file system becomes read-only mid-sweep (a remount is refused while a file is open for
// writing, and a file's permissions are checked when it is opened, not when it is written).
// Needs root, mkfs.ext4 and loop devices; without, the test skips.
class Ext4Disk {
public:
    Ext4Disk(std::string image, std::string folder) : image_(std::move(image)), folder_(std::move(folder)) {
        std::filesystem::create_directories(folder_);
        const auto made = test::run_command("truncate -s 16M '" + image_ + "' && mkfs.ext4 -q -F '" + image_ + "'");
        if (made.exit_code != 0) {
            why_ = made.output;
            return;
        }
        mount();
    }
    ~Ext4Disk() {
        if (mounted_) test::run_command("umount '" + folder_ + "'");
    }
    Ext4Disk(const Ext4Disk&) = delete;
    Ext4Disk& operator=(const Ext4Disk&) = delete;
    bool mounted() const { return mounted_; }
    const std::string& why_not() const { return why_; }
    std::string file(const std::string& name) const { return folder_ + "/" + name; }

    // What a failing disk does: ext4 records an error and, with errors=remount-ro, refuses every
    // write from then on, to files already open too.
    void fail() {
        const std::string device = test::run_command("findmnt -n -o SOURCE '" + folder_ + "'").output;
        const std::string name = std::filesystem::path(device.substr(0, device.find('\n'))).filename().string();
        std::ofstream("/sys/fs/ext4/" + name + "/trigger_fs_error") << "sweetspot test\n";
    }
    // Unmounted, checked and mounted again writable, as an administrator brings the disk back.
    void repair() {
        REQUIRE(test::run_command("umount '" + folder_ + "'").exit_code == 0);
        mounted_ = false;
        test::run_command("e2fsck -fy '" + image_ + "'");
        mount();
        REQUIRE(mounted_);
    }

private:
    void mount() {
        const auto r = test::run_command("mount -o loop,errors=remount-ro '" + image_ + "' '" + folder_ + "'");
        mounted_ = r.exit_code == 0;
        if (!mounted_) why_ = r.output;
    }

    std::string image_, folder_, why_;
    bool mounted_ = false;
};

// `sweetspot run` in the background, its output in `log`.
pid_t start_sweep(const std::string& matrix, const std::string& db, const std::string& log) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const std::string binary = test::sweetspot_binary();
        if (!freopen(log.c_str(), "w", stdout) || dup2(STDOUT_FILENO, STDERR_FILENO) < 0) _exit(126);
        execl(binary.c_str(), binary.c_str(), "run", matrix.c_str(), "--db", db.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    return pid;
}

int wait_exit(pid_t pid) {
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits (up to a minute) until the database at `db` holds at least `n` cells.
bool wait_for_cells(const std::string& db, int n) {
    for (int i = 0; i < 600; ++i) {
        if (std::filesystem::exists(db)) {
            try {
                if (scalar(db, "SELECT count(*) FROM cells") >= n) return true;
            } catch (const SqliteError&) {
                // Not created yet, or between its schema's statements.
            }
        }
        std::this_thread::sleep_for(100ms);
    }
    return false;
}

}  // namespace

TEST_CASE("a database that lacks a column of its version is refused before anything runs; its cells stay",
          "[runner][store]") {
    TempDir tmp;
    const auto matrix = tmp.file("m.toml"), db = tmp.file("r.db");
    test::write_file(matrix, matrix_text(3, 2));
    REQUIRE(test::run_sweetspot("run '" + matrix + "' --db '" + db + "'").exit_code == 0);
    {
        Database d(db, Database::Mode::read_write);
        d.exec("ALTER TABLE cells DROP COLUMN launch");
    }
    const auto r = test::run_sweetspot("run '" + matrix + "' --db '" + db + "' --rerun");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, ContainsSubstring("column cells.launch is missing"));
    CHECK_THAT(r.output, ContainsSubstring("ALTER TABLE cells ADD COLUMN launch TEXT NOT NULL DEFAULT 'kernels'"));
    // Nothing ran and nothing was written: one run, closed; the three cells as they were.
    CHECK(scalar(db, "SELECT count(*) FROM runs") == 1);
    CHECK(text_of(db, "SELECT status FROM runs") == "finished");
    CHECK(scalar(db, "SELECT count(*) FROM cells WHERE status = 'ok'") == 3);
    CHECK(scalar(db, "SELECT count(*) FROM iterations WHERE phase = 'timed'") == 6);
}

TEST_CASE("a disk that fills mid-sweep stops it with the reason; the same command resumes once there is room",
          "[runner][store]") {
    TempDir tmp;
    // The schema's pages plus a slack that lets the run's closing UPDATE in after a cell's
    // transaction found the disk full (its size tracks the schema: 720k since schema 33's columns).
    SmallDisk disk(tmp.file("disk"), "720k");
    if (!disk.mounted()) SKIP("cannot mount a tmpfs to fill (" + disk.why_not() + "); needs root");
    const auto matrix = tmp.file("m.toml"), db = disk.file("r.db");
    // 20 cells of 400 timed iterations: about 50 kB each, more than the disk holds after the schema.
    test::write_file(matrix, matrix_text(20, 400));
    const auto r = test::run_sweetspot("run '" + matrix + "' --db '" + db + "'");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, ContainsSubstring(db + ": database or disk is full"));
    CHECK_THAT(r.output, ContainsSubstring("the same command resumes"));
    const std::int64_t stored = scalar(db, "SELECT count(*) FROM cells");
    CHECK(stored > 0);
    CHECK(stored < 20);
    // Each stored cell is whole, and the run says why it stopped.
    CHECK(scalar(db, "SELECT count(*) FROM iterations") == stored * 400);
    CHECK(text_of(db, "SELECT status FROM runs") == "interrupted");
    CHECK_THAT(text_of(db, "SELECT stop_reason FROM runs"), ContainsSubstring("database or disk is full"));
    CHECK(text_of(db, "PRAGMA quick_check") == "ok");

    disk.grow("8m");
    const auto again = test::run_sweetspot("run '" + matrix + "' --db '" + db + "'");
    INFO(again.output);
    CHECK(again.exit_code == 0);
    CHECK(scalar(db, "SELECT count(*) FROM cells WHERE status = 'ok'") == 20);
    CHECK(scalar(db, "SELECT count(*) FROM iterations") == 20 * 400);
    CHECK(scalar(db, "SELECT count(*) FROM runs WHERE run_id = 2 AND status = 'finished'") == 1);
}

TEST_CASE("a file system made read-only mid-sweep stops it with the reason; the cells stored before stay",
          "[runner][store]") {
    TempDir tmp;
    Ext4Disk disk(tmp.file("disk.img"), tmp.file("disk"));
    if (!disk.mounted()) SKIP("cannot mount an ext4 image to make read-only: " + disk.why_not());
    const auto matrix = tmp.file("m.toml"), db = disk.file("r.db"), log = tmp.file("sweep.log");
    test::write_file(matrix, matrix_text(40, 200));
    const pid_t sweep = start_sweep(matrix, db, log);
    REQUIRE(wait_for_cells(db, 2));
    disk.fail();
    const int code = wait_exit(sweep);
    const std::string output = test::read_bytes(log);
    INFO(output);
    CHECK(code == 2);
    CHECK_THAT(output, ContainsSubstring("sweetspot run: error: "));
    CHECK_THAT(output, ContainsSubstring("the sweep stopped"));
    CHECK_THAT(output, ContainsSubstring("closing the run failed as well"));
    disk.repair();
    const std::int64_t stored = scalar(db, "SELECT count(*) FROM cells");
    CHECK(stored >= 2);
    CHECK(stored < 40);
    CHECK(scalar(db, "SELECT count(*) FROM iterations") == stored * 200);
    CHECK(text_of(db, "PRAGMA quick_check") == "ok");
    // The run could not be closed on a read-only disk: the next sweep closes it, saying so.
    const auto again = test::run_sweetspot("run '" + matrix + "' --db '" + db + "'");
    INFO(again.output);
    CHECK(again.exit_code == 0);
    CHECK(scalar(db, "SELECT count(*) FROM cells WHERE status = 'ok'") == 40);
    CHECK(text_of(db, "SELECT status FROM runs WHERE run_id = 1") == "interrupted");
    CHECK_THAT(text_of(db, "SELECT stop_reason FROM runs WHERE run_id = 1"), ContainsSubstring("without closing the run"));
}

TEST_CASE("a damaged page is found before a sweep writes anything", "[runner][store]") {
    TempDir tmp;
    const auto matrix = tmp.file("m.toml"), db = tmp.file("r.db");
    test::write_file(matrix, matrix_text(3, 50));
    REQUIRE(test::run_sweetspot("run '" + matrix + "' --db '" + db + "'").exit_code == 0);
    // The first byte of the iterations table's root page is its b-tree page type; 0 is none.
    const std::int64_t page_size = scalar(db, "PRAGMA page_size");
    const std::int64_t root = scalar(db, "SELECT rootpage FROM sqlite_master WHERE name = 'iterations'");
    {
        std::fstream f(db, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp((root - 1) * page_size);
        f.put('\0');
    }
    const std::string before = test::read_bytes(db);
    const auto r = test::run_sweetspot("run '" + matrix + "' --db '" + db + "' --rerun");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, ContainsSubstring(db + " is damaged (SQLite's quick_check)"));
    CHECK_THAT(r.output, ContainsSubstring(".recover"));
    CHECK(test::read_bytes(db) == before);
}

TEST_CASE("a lock held longer than SQLite waits delays storing a cell, not the sweep", "[runner][store]") {
    TempDir tmp;
    const auto matrix = tmp.file("m.toml"), db = tmp.file("r.db"), log = tmp.file("sweep.log");
    // Short cells, more than the sweep stores before the lock is taken: the next one waits for it.
    test::write_file(matrix, matrix_text(20, 50));
    const pid_t sweep = start_sweep(matrix, db, log);
    REQUIRE(wait_for_cells(db, 1));
    {
        // Another writer holds the lock for longer than one busy timeout (10 s) after the sweep's
        // next cell, a fraction of a second away, starts waiting for it.
        Database other(db, Database::Mode::read_write);
        other.exec("BEGIN IMMEDIATE");
        std::this_thread::sleep_for(15s);
        other.exec("COMMIT");
    }
    const int code = wait_exit(sweep);
    const std::string output = test::read_bytes(log);
    INFO(output);
    CHECK(code == 0);
    CHECK_THAT(output, ContainsSubstring("lock; waiting to store the cell (1 of"));
    CHECK(scalar(db, "SELECT count(*) FROM cells WHERE status = 'ok'") == 20);
    CHECK(text_of(db, "SELECT status FROM runs") == "finished");
}

TEST_CASE("a run a killed sweep left running is marked interrupted by the next sweep", "[runner][store]") {
    TempDir tmp;
    const auto matrix = tmp.file("m.toml"), db = tmp.file("r.db");
    test::write_file(matrix, matrix_text(4, 2));
    const pid_t sweep = start_sweep(matrix, db, tmp.file("sweep.log"));
    REQUIRE(wait_for_cells(db, 1));
    kill(sweep, SIGKILL);
    wait_exit(sweep);
    CHECK(text_of(db, "SELECT status FROM runs WHERE run_id = 1") == "running");
    // Reading does not change it; the next sweep, which holds the lock a living sweep would, does.
    CHECK(test::run_sweetspot("summary '" + db + "'").exit_code == 0);
    CHECK(text_of(db, "SELECT status FROM runs WHERE run_id = 1") == "running");
    const auto r = test::run_sweetspot("run '" + matrix + "' --db '" + db + "'");
    INFO(r.output);
    CHECK(r.exit_code == 0);
    CHECK(text_of(db, "SELECT status FROM runs WHERE run_id = 1") == "interrupted");
    CHECK_THAT(text_of(db, "SELECT stop_reason FROM runs WHERE run_id = 1"),
               ContainsSubstring("ended without closing the run"));
    CHECK(text_of(db, "SELECT status FROM runs WHERE run_id = 2") == "finished");
}
