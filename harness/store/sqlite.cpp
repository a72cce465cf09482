#include "harness/store/sqlite.hpp"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace sweetspot {
namespace {

[[noreturn]] void fail(sqlite3* db, const std::string& what) {
    if (db == nullptr) throw SqliteError(what + ": out of memory", SQLITE_NOMEM);
    throw SqliteError(what + ": " + sqlite3_errmsg(db), sqlite3_extended_errcode(db));
}

int open_flags(Database::Mode mode) {
    switch (mode) {
        case Database::Mode::read_only: return SQLITE_OPEN_READONLY;
        case Database::Mode::read_only_immutable: return SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
        case Database::Mode::query_only: return SQLITE_OPEN_READWRITE;
        // URIs in ATTACH (merge attaches its shards read-only); the path itself is opened as it is.
        case Database::Mode::read_write: return SQLITE_OPEN_READWRITE | SQLITE_OPEN_URI;
        case Database::Mode::read_write_create: return SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    }
    return SQLITE_OPEN_READONLY;
}

// "file:PATH?immutable=1" with the characters a URI gives a meaning to escaped.
std::string immutable_uri(const std::string& path) {
    std::string uri = "file:";
    for (const char c : path) {
        if (c == '%' || c == '?' || c == '#') {
            static const char hex[] = "0123456789ABCDEF";
            uri += '%';
            uri += hex[(static_cast<unsigned char>(c) >> 4) & 0xF];
            uri += hex[static_cast<unsigned char>(c) & 0xF];
        } else {
            uri += c;
        }
    }
    return uri + "?immutable=1";
}

// Why this user cannot read `path`; `what` says what it may not do.
std::string unreadable(const std::string& path, int error, const std::string& what) {
    if (error == EACCES || error == EPERM) return "cannot read " + path + ": permission denied (this user may not " + what + ")";
    return "cannot read " + path + ": " + std::strerror(error);
}

// The big-endian unsigned number of `bytes` bytes at `p`, as SQLite's file header stores them.
std::uint64_t big_endian(const unsigned char* p, int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = v << 8 | p[i];
    return v;
}

}  // namespace

void require_database_file(const std::string& path, bool may_create) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        if (errno != ENOENT) throw std::runtime_error(unreadable(path, errno, "enter a folder above it"));
        if (may_create) return;
        throw std::runtime_error("no such database: " + path);
    }
    if (S_ISDIR(st.st_mode))
        throw std::runtime_error(path + " is a folder, not a database file; name a file, such as " + path + "/results.db");
    // Opening a FIFO to read its header would wait for a writer.
    if (!S_ISREG(st.st_mode)) throw std::runtime_error(path + " is not a regular file, so not a database");
    if (st.st_size == 0) {
        if (may_create) return;
        throw std::runtime_error(path + " is an empty file, not a results database");
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error(unreadable(path, errno, "read the file"));
    unsigned char header[100] = {};
    const ssize_t got = ::pread(fd, header, sizeof header, 0);
    const int read_error = errno;
    ::close(fd);
    if (got < 0) throw std::runtime_error(unreadable(path, read_error, "read the file"));
    static constexpr char kMagic[] = "SQLite format 3";  // with its NUL, the first 16 bytes of every SQLite file
    if (got < static_cast<ssize_t>(sizeof header) || std::memcmp(header, kMagic, sizeof kMagic) != 0)
        throw std::runtime_error(path + " is not an SQLite database (it does not begin with SQLite's file header); a results "
                                        "database is a file that sweetspot run or merge wrote");
    // SQLite's file format: the page size at offset 16 (1 for 65536), the page count at 28, valid
    // where the change counter at 24 equals the one at 92. Pages past the end of the file may be
    // in a -wal file that holds transactions, so only a file without one is called truncated.
    const std::uint64_t page_size = big_endian(header + 16, 2) == 1 ? 65536 : big_endian(header + 16, 2);
    const std::uint64_t pages = big_endian(header + 28, 4);
    const bool count_valid = pages > 0 && big_endian(header + 24, 4) == big_endian(header + 92, 4);
    const auto bytes = static_cast<std::uint64_t>(st.st_size);
    if (count_valid && pages * page_size > bytes && !has_wal_frames(path))
        throw std::runtime_error(path + " is truncated: its header says " + std::to_string(pages * page_size) +
                                 " bytes, the file has " + std::to_string(bytes) + "; restore it from a copy, or recover what "
                                 "it holds with `sqlite3 " + path + " .recover | sqlite3 NEW.db`");
}

Database::Database(const std::string& path, Mode mode) : path_(path) {
    const std::string name = mode == Mode::read_only_immutable ? immutable_uri(path) : path;
    if (const int rc = sqlite3_open_v2(name.c_str(), &db_, open_flags(mode), nullptr); rc != SQLITE_OK) {
        std::string msg = "cannot open database '" + path + "': " + (db_ ? sqlite3_errmsg(db_) : "out of memory");
        sqlite3_close(db_);
        db_ = nullptr;
        throw SqliteError(msg, rc);
    }
    sqlite3_extended_result_codes(db_, 1);
    if (mode == Mode::query_only && sqlite3_exec(db_, "PRAGMA query_only = ON", nullptr, nullptr, nullptr) != SQLITE_OK) {
        const std::string msg = "cannot open database '" + path + "': " + sqlite3_errmsg(db_);
        sqlite3_close(db_);
        db_ = nullptr;
        throw SqliteError(msg, SQLITE_ERROR);
    }
    // Readers (a user's query, `summary`) may run while a sweep writes.
    sqlite3_busy_timeout(db_, 10000);
}

bool SqliteError::busy() const { return (code_ & 0xff) == SQLITE_BUSY || (code_ & 0xff) == SQLITE_LOCKED; }
bool SqliteError::damaged() const { return (code_ & 0xff) == SQLITE_CORRUPT || (code_ & 0xff) == SQLITE_NOTADB; }

Database::Database(Database&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}

Database& Database::operator=(Database&& other) noexcept {
    if (this != &other) {
        sqlite3_close(db_);
        db_ = std::exchange(other.db_, nullptr);
        path_ = std::move(other.path_);
    }
    return *this;
}

Database::~Database() { sqlite3_close(db_); }

void Database::exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
        std::string msg = err ? err : sqlite3_errmsg(db_);
        sqlite3_free(err);
        throw SqliteError(path_ + ": " + msg, sqlite3_extended_errcode(db_));
    }
}

Statement Database::prepare(std::string_view sql) { return Statement(db_, sql); }

std::int64_t Database::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }

int Database::attach_limit() const { return sqlite3_limit(db_, SQLITE_LIMIT_ATTACHED, -1); }

Statement::Statement(sqlite3* db, std::string_view sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr) != SQLITE_OK)
        fail(db, "cannot prepare \"" + std::string(sql.substr(0, 80)) + "\"");
}

Statement::Statement(Statement&& other) noexcept : db_(other.db_), stmt_(std::exchange(other.stmt_, nullptr)) {}

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::bind(int i, std::int64_t v) {
    if (sqlite3_bind_int64(stmt_, i, v) != SQLITE_OK) fail(db_, "bind");
    return *this;
}

Statement& Statement::bind(int i, double v) {
    if (sqlite3_bind_double(stmt_, i, v) != SQLITE_OK) fail(db_, "bind");
    return *this;
}

Statement& Statement::bind(int i, std::string_view v) {
    if (sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT) != SQLITE_OK)
        fail(db_, "bind");
    return *this;
}

Statement& Statement::bind_blob(int i, std::span<const float> values) {
    if (sqlite3_bind_blob64(stmt_, i, values.data(), values.size_bytes(), SQLITE_TRANSIENT) != SQLITE_OK) fail(db_, "bind");
    return *this;
}

Statement& Statement::bind_null(int i) {
    if (sqlite3_bind_null(stmt_, i) != SQLITE_OK) fail(db_, "bind");
    return *this;
}

bool Statement::step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    fail(db_, "step");
}

void Statement::run() {
    while (step()) {
    }
}

void Statement::reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
}

int Statement::column_count() const { return sqlite3_column_count(stmt_); }
bool Statement::is_null(int i) const { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }
std::int64_t Statement::int64(int i) const { return sqlite3_column_int64(stmt_, i); }
double Statement::real(int i) const { return sqlite3_column_double(stmt_, i); }

std::string Statement::text(int i) const {
    const auto* p = sqlite3_column_text(stmt_, i);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(stmt_, i)))
             : std::string();
}

std::vector<float> Statement::floats(int i) const {
    const void* p = sqlite3_column_blob(stmt_, i);
    const auto bytes = static_cast<std::size_t>(sqlite3_column_bytes(stmt_, i));
    std::vector<float> values(bytes / sizeof(float));
    if (p != nullptr) std::memcpy(values.data(), p, values.size() * sizeof(float));
    return values;
}

Transaction::Transaction(Database& db) : db_(db) { db_.exec("BEGIN IMMEDIATE"); }

Transaction::~Transaction() {
    if (!done_) {
        try {
            db_.exec("ROLLBACK");
        } catch (const SqliteError&) {
            // The connection is already broken; nothing was committed, which is the point.
        }
    }
}

void Transaction::commit() {
    db_.exec("COMMIT");
    done_ = true;
}

bool can_read(Database& db) {
    try {
        db.prepare("SELECT count(*) FROM sqlite_master").step();
        return true;
    } catch (const SqliteError&) {
        return false;
    }
}

bool has_table(Database& db, const std::string& name) {
    auto st = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
    st.bind(1, name);
    return st.step();
}

bool has_column(Database& db, const std::string& table, const std::string& column) {
    auto st = db.prepare("SELECT 1 FROM pragma_table_info(?) WHERE name = ?");
    st.bind(1, table).bind(2, column);
    return st.step();
}

std::set<std::string> column_names(Database& db, const std::string& table) {
    std::set<std::string> names;
    auto st = db.prepare("SELECT name FROM pragma_table_info(?)");
    st.bind(1, table);
    while (st.step()) names.insert(st.text(0));
    return names;
}

bool has_wal_frames(const std::string& path) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path + "-wal", ec);
    return !ec && size > 0;
}

}  // namespace sweetspot
