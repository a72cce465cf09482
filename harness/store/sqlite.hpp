#pragma once
// Thin RAII over the SQLite C API: a connection, prepared statements, a transaction guard.
// Every return code is checked; failures throw SqliteError with SQLite's own message.
#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace sweetspot {

class SqliteError : public std::runtime_error {
public:
    // `code`: SQLite's extended result code.
    SqliteError(const std::string& what, int code) : std::runtime_error(what), code_(code) {}
    int code() const { return code_; }
    // Another connection held a lock for longer than this one waited (the busy timeout).
    bool busy() const;
    // The file is not a database, or one of its pages is not what SQLite wrote.
    bool damaged() const;

private:
    int code_;
};

class Statement;

class Database {
public:
    // read_only_immutable: for a file that nobody can be writing, e.g. a WAL database in a folder
    // this process cannot write, where SQLite could not create the shared-memory file a plain
    // read-only connection needs. query_only: opened for writing, every write refused (PRAGMA
    // query_only), for a reader that may write the file and its folder: SQLite creates a WAL
    // database's -wal and -shm files for any reader, and only a connection that can write removes
    // them when it is the last to close.
    enum class Mode { read_only, read_only_immutable, query_only, read_write, read_write_create };
    Database(const std::string& path, Mode mode);
    Database(Database&& other) noexcept;
    Database& operator=(Database&& other) noexcept;
    Database(const Database&) = delete;
    Database& operator=(const Database&) = delete;
    ~Database();

    void exec(const std::string& sql);
    Statement prepare(std::string_view sql);
    std::int64_t last_insert_rowid() const;
    // How many databases this connection can have attached at once.
    int attach_limit() const;
    const std::string& path() const { return path_; }
    sqlite3* handle() const { return db_; }

private:
    sqlite3* db_ = nullptr;
    std::string path_;
};

class Statement {
public:
    Statement(sqlite3* db, std::string_view sql);
    Statement(Statement&& other) noexcept;
    Statement& operator=(Statement&&) = delete;
    Statement(const Statement&) = delete;
    ~Statement();

    // Bind by 1-based index.
    Statement& bind(int i, std::int64_t v);
    Statement& bind(int i, int v) { return bind(i, static_cast<std::int64_t>(v)); }
    Statement& bind(int i, double v);
    Statement& bind(int i, std::string_view v);
    Statement& bind(int i, const char* v) { return bind(i, std::string_view(v)); }
    Statement& bind(int i, const std::string& v) { return bind(i, std::string_view(v)); }
    Statement& bind_null(int i);
    // The bytes of `values` as a BLOB (in this machine's byte order).
    Statement& bind_blob(int i, std::span<const float> values);
    template <class T>
    Statement& bind(int i, const std::optional<T>& v) {
        return v ? bind(i, *v) : bind_null(i);
    }

    // Advances to the next row; false when done.
    bool step();
    // Runs a statement that returns no rows.
    void run();
    void reset();

    int column_count() const;
    bool is_null(int i) const;
    std::int64_t int64(int i) const;
    double real(int i) const;
    std::string text(int i) const;
    // A BLOB column read back as floats (bind_blob's inverse); empty for NULL.
    std::vector<float> floats(int i) const;

private:
    sqlite3* db_;
    sqlite3_stmt* stmt_ = nullptr;
};

// Rolls back unless commit() was called: a cell's rows land completely or not at all.
class Transaction {
public:
    explicit Transaction(Database& db);
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;
    ~Transaction();
    void commit();

private:
    Database& db_;
    bool done_ = false;
};

// Whether SQLite can read the file `db` opened: not a file that is not SQLite, nor a WAL database
// through a read-only connection in a folder where SQLite cannot create the shared-memory file.
bool can_read(Database& db);
// Whether the WAL database at `path` has transactions in its -wal file that its database file
// may not hold yet: a connection that opens it `immutable` would not see them.
bool has_wal_frames(const std::string& path);
// Refuses, naming the cause, a path that cannot hold a database this user reads, before SQLite
// opens it (SQLite calls a folder a disk I/O error, a file it may not read one it cannot open, and
// a truncated file malformed): a folder, a file or folder this user may not read, a file that is
// not SQLite, one shorter than its header says. A missing or empty file is refused too, unless
// `may_create` (a sweep creates the database there).
void require_database_file(const std::string& path, bool may_create = false);
// Whether `db` has a table of that name (an older results database may lack a later one).
bool has_table(Database& db, const std::string& name);
// Whether `table` has a column named `column` (databases of older schema versions lack some).
bool has_column(Database& db, const std::string& table, const std::string& column);
// The names of `table`'s columns.
std::set<std::string> column_names(Database& db, const std::string& table);

}  // namespace sweetspot
