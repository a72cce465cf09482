// What `summary`, `list`, `estimate` and `compare` print for other tools (--format csv|json): the keys
// results/README.md ("Machine-readable output") documents, built from the database's own `axes` and
// `measures` tables; each value as its column holds it, typed by the column, not by its text; CSV
// quoted per RFC 4180; and '|' escaped in the Markdown table. The CSV and the documentation are
// parsed here, the JSON by nlohmann-json.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/matrix/matrix.hpp"
#include "harness/measure/cell_outcome.hpp"
#include "harness/store/schema.hpp"
#include "harness/store/sqlite.hpp"
#include "harness/store/store.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;
using json = nlohmann::ordered_json;

namespace {

// Models whose names look like numbers, or like the tables' "-", or need quoting in CSV and
// escaping in Markdown: each must come out as the text it is.
constexpr const char* kQuoted = "say \"hi\", a|b";
const std::vector<std::string> kModels = {"1e5", "0042", "-", kQuoted};

// A matrix of one cell per model on the host backend, and one that cannot run there (fp16), so
// has no measurements.
std::string formats_matrix() {
    std::string toml = "name = \"formats\"\n";
    for (const std::string& name : kModels)
        toml += "[[models]]\nname = " + json(name).dump() + "\nlayers = 1\nhidden = 16\nheads = 2\nvocab = 64\npositions = 16\n";
    toml += "[defaults]\nseq = 4\nwarmups = 0\niterations = 2\n[[sweep]]\nname = \"models\"\nmodel = [";
    for (std::size_t i = 0; i < kModels.size(); ++i) toml += (i ? ", " : "") + json(kModels[i]).dump();
    toml += "]\n[[sweep]]\nname = \"unmeasured\"\nmodel = \"1e5\"\ndtype = \"fp16\"\n";
    return toml;
}

// The database of formats_matrix, run once for the tests that read it.
const std::string& formats_db() {
    static const test::TempDir tmp;
    static const std::string db = [] {
        const std::string matrix = tmp.file("m.toml"), path = tmp.file("r.db");
        test::write_file(matrix, formats_matrix());
        const auto run = test::run_sweetspot("run '" + matrix + "' --db '" + path + "'");
        if (run.exit_code != 0) throw std::runtime_error("the formats matrix did not run: " + run.output);
        return path;
    }();
    return db;
}

// RFC 4180 records: fields separated by commas, records by CRLF, a quoted field holding commas,
// line breaks and doubled quotes. Throws on a bare LF or a stray quote.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
    std::vector<std::vector<std::string>> records;
    std::vector<std::string> record;
    std::string field;
    bool quoted = false, in_quotes = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_quotes) {
            if (c != '"') field += c;
            else if (i + 1 < text.size() && text[i + 1] == '"') field += text[++i];
            else in_quotes = false;
        } else if (c == '"') {
            if (!field.empty() || quoted) throw std::runtime_error("a quote inside an unquoted CSV field");
            in_quotes = quoted = true;
        } else if (c == ',' || c == '\r') {
            record.push_back(field);
            field.clear();
            quoted = false;
            if (c == '\r') {
                if (i + 1 >= text.size() || text[i + 1] != '\n') throw std::runtime_error("CR without LF in CSV");
                ++i;
                records.push_back(record);
                record.clear();
            }
        } else if (c == '\n') {
            throw std::runtime_error("a line of CSV ends in LF, not CRLF");
        } else {
            field += c;
        }
    }
    if (in_quotes || !field.empty() || !record.empty()) throw std::runtime_error("CSV ends inside a record");
    return records;
}

// A column's declared type as the database's `axes` and `measures` tables (or the README, for the
// keys that are no axis or measure) give it: INTEGER, REAL, TEXT or flag (unit 0/1).
struct Schema {
    std::vector<std::string> axes;     // column names, in `axes` order
    std::vector<std::string> identity;  // those of the workload and placement axes
    std::vector<std::string> summary_measures;  // in_summary, and noisy
    std::map<std::string, std::string> types;

    explicit Schema(Database& db) {
        auto a = db.prepare("SELECT column_name, type, unit, role FROM axes ORDER BY rowid");
        while (a.step()) {
            axes.push_back(a.text(0));
            if (a.text(3) == "workload" || a.text(3) == "placement") identity.push_back(a.text(0));
            types[a.text(0)] = a.text(2) == "0/1" ? "flag" : a.text(1);
        }
        auto m = db.prepare("SELECT name, type, unit, in_summary FROM measures ORDER BY rowid");
        while (m.step()) {
            if (m.int64(3) != 0 || m.text(0) == "noisy") summary_measures.push_back(m.text(0));
            types[m.text(0)] = m.text(2) == "0/1" ? "flag" : m.text(1);
        }
    }

    // The keys results/README.md lists for `table` ("#### `summary`"), in order, its placeholders
    // (*axes*, *identity*, *measures*) replaced by the columns they stand for; the types of the
    // keys it names go to `types`.
    std::vector<std::string> documented_keys(const std::string& table) {
        std::istringstream in(test::read_bytes(test::source_path("results/README.md")));
        const std::regex key_row(R"(^\| `(\w+)` \| (INTEGER|REAL|TEXT|flag) \|)"), placeholder(R"(^\| \*(\w+)\* \|)");
        std::vector<std::string> keys;
        bool in_section = false, in_table = false;
        std::smatch m;
        for (std::string line; std::getline(in, line);) {
            if (line.rfind("## ", 0) == 0) in_section = line == "## Machine-readable output";
            if (!in_section) continue;
            if (line.rfind("#### ", 0) == 0) in_table = line == "#### `" + table + "`";
            if (!in_table) continue;
            if (std::regex_search(line, m, key_row)) {
                keys.push_back(m[1]);
                types[m[1]] = m[2];
            } else if (std::regex_search(line, m, placeholder)) {
                const std::vector<std::string>& columns =
                    m[1] == "axes" ? axes : m[1] == "identity" ? identity : summary_measures;
                keys.insert(keys.end(), columns.begin(), columns.end());
            }
        }
        return keys;
    }
};

// The keys of a JSON object, in order (ordered_json keeps it).
std::vector<std::string> keys_of(const json& object) {
    std::vector<std::string> keys;
    for (const auto& [key, value] : object.items()) keys.push_back(key);
    return keys;
}

// Whether `v` has the JSON type of a column of type `type`: null, or a bool for a flag, an integer
// for INTEGER, a number with a fraction or exponent for REAL, a string for TEXT.
bool has_type(const json& v, const std::string& type) {
    if (v.is_null()) return true;
    if (type == "flag") return v.is_boolean();
    if (type == "INTEGER") return v.is_number_integer();
    if (type == "REAL") return v.is_number_float();
    return v.is_string();
}

// The JSON value and the CSV field of column `i` of `st`, of type `type`, checked against what
// SQLite holds there.
void check_against_db(const json& v, const std::string& field, Statement& st, int i, const std::string& type) {
    if (st.is_null(i)) {
        CHECK(v.is_null());
        CHECK(field.empty());
        return;
    }
    REQUIRE(has_type(v, type));
    if (type == "flag") {
        CHECK(v.get<bool>() == (st.int64(i) != 0));
        CHECK(field == (st.int64(i) != 0 ? "1" : "0"));
    } else if (type == "INTEGER") {
        CHECK(v.get<std::int64_t>() == st.int64(i));
        CHECK(field == std::to_string(st.int64(i)));
    } else if (type == "REAL") {
        CHECK(v.get<double>() == st.real(i));  // every digit: not rounded
        CHECK(std::strtod(field.c_str(), nullptr) == st.real(i));
    } else {
        CHECK(v.get<std::string>() == st.text(i));
        CHECK(field == st.text(i));
    }
}

}  // namespace

TEST_CASE("summary --format json and csv: the database's column names as keys, each value as its column holds it",
          "[cli][format]") {
    const std::string& db = formats_db();
    const auto as_json = test::run_sweetspot("summary '" + db + "' --format json");
    const auto as_csv = test::run_sweetspot("summary '" + db + "' --format csv");
    INFO(as_json.output);
    INFO(as_csv.output);
    REQUIRE(as_json.exit_code == 0);
    REQUIRE(as_csv.exit_code == 0);
    const auto rows = json::parse(as_json.output);
    const auto records = parse_csv(as_csv.output);
    REQUIRE(rows.size() == kModels.size() + 1);
    REQUIRE(records.size() == rows.size() + 1);  // the header, then a line per cell

    Database results(db, Database::Mode::read_only);
    Schema schema(results);
    const std::vector<std::string> keys = schema.documented_keys("summary");
    REQUIRE(keys.size() == records[0].size());
    CHECK(records[0] == keys);
    for (const std::string& key : keys) {
        INFO(key);
        CHECK(schema.types.count(key));  // an axis, a measure or a documented key
    }
    for (const std::string& axis : schema.axes) CHECK(std::count(keys.begin(), keys.end(), axis) == 1);

    std::string columns;  // every key but the one that is no column of `cells`
    for (const std::string& key : keys)
        if (key != "timed_iterations") columns += (columns.empty() ? "" : ", ") + key;
    auto st = results.prepare("SELECT " + columns + ", (SELECT count(*) FROM iterations i WHERE i.cell_id = cells.cell_id"
                              " AND i.phase = 'timed') AS timed_iterations FROM cells WHERE cell_id = ?");
    std::set<std::string> models;
    for (std::size_t r = 0; r < rows.size(); ++r) {
        const auto& row = rows[r];
        const auto& record = records[r + 1];
        REQUIRE(keys_of(row) == keys);
        REQUIRE(record.size() == keys.size());
        st.reset();
        st.bind(1, row.at("cell_id").get<std::int64_t>());
        REQUIRE(st.step());
        int column = 0;
        for (std::size_t k = 0; k < keys.size(); ++k) {
            // The statement reads timed_iterations last.
            const int i = keys[k] == "timed_iterations" ? static_cast<int>(keys.size()) - 1 : column++;
            INFO("cell " << row.at("cell_id") << ", " << keys[k] << ": " << row.at(keys[k]).dump() << ", CSV " << record[k]);
            check_against_db(row.at(keys[k]), record[k], st, i, schema.types.at(keys[k]));
        }
        models.insert(row.at("model").get<std::string>());
        if (row.at("status") == "skipped") {
            CHECK(row.at("latency_median_ms").is_null());
            CHECK(row.at("noisy") == false);
        } else {
            CHECK(row.at("latency_median_ms").is_number_float());
        }
    }
    CHECK(models == std::set<std::string>(kModels.begin(), kModels.end()));
}

TEST_CASE("summary --format json: text that looks like a number, or like a missing value, stays text", "[cli][format]") {
    const auto as_json = test::run_sweetspot("summary '" + formats_db() + "' --format json");
    INFO(as_json.output);
    REQUIRE(as_json.exit_code == 0);
    std::multiset<std::string> models;
    for (const auto& row : json::parse(as_json.output)) {
        INFO(row.at("model").dump());
        REQUIRE(row.at("model").is_string());
        models.insert(row.at("model").get<std::string>());
    }
    CHECK(models == std::multiset<std::string>{"1e5", "1e5", "0042", "-", kQuoted});  // 1e5 twice: fp32 and fp16
}

TEST_CASE("summary --format csv quotes a field with a quote or a comma, doubling its quotes (RFC 4180)", "[cli][format]") {
    const auto as_csv = test::run_sweetspot("summary '" + formats_db() + "' --format csv");
    INFO(as_csv.output);
    REQUIRE(as_csv.exit_code == 0);
    CHECK_THAT(as_csv.output, ContainsSubstring(",\"say \"\"hi\"\", a|b\","));
    const auto records = parse_csv(as_csv.output);
    const auto model = std::find(records.at(0).begin(), records.at(0).end(), "model") - records.at(0).begin();
    std::set<std::string> models;
    for (const auto& record : records) models.insert(record.at(static_cast<std::size_t>(model)));
    CHECK(models.count(kQuoted));
}

TEST_CASE("summary --format markdown escapes '|' in a cell", "[cli][format]") {
    const auto md = test::run_sweetspot("summary '" + formats_db() + "' --format markdown");
    INFO(md.output);
    REQUIRE(md.exit_code == 0);
    CHECK_THAT(md.output, ContainsSubstring("| say \"hi\", a\\|b |"));
    // Every line has as many cell borders as the header: a '|' not escaped would add one.
    std::istringstream lines(md.output);
    std::vector<std::size_t> borders;
    for (std::string line; std::getline(lines, line);) {
        std::size_t n = 0;
        for (std::size_t i = 0; i < line.size(); ++i) n += line[i] == '|' && (i == 0 || line[i - 1] != '\\');
        borders.push_back(n);
    }
    REQUIRE(borders.size() == kModels.size() + 3);  // header, rule, a line per cell
    for (const std::size_t n : borders) CHECK(n == borders.front());
}

TEST_CASE("list and estimate --format json and csv: axis columns and the documented keys, typed", "[cli][format][estimate]") {
    test::TempDir tmp;
    const auto matrix = tmp.file("m.toml");
    test::write_file(matrix, formats_matrix());
    Store store = Store::open(tmp.file("schema.db"));  // every database describes its columns
    Schema schema(store.db());
    for (const char* table : {"list", "estimate"}) {
        INFO(table);
        const auto as_json = test::run_sweetspot(std::string(table) + " '" + matrix + "' --format json");
        const auto as_csv = test::run_sweetspot(std::string(table) + " '" + matrix + "' --format csv");
        INFO(as_json.output);
        REQUIRE(as_json.exit_code == 0);
        REQUIRE(as_csv.exit_code == 0);
        const auto rows = json::parse(as_json.output);
        const auto records = parse_csv(as_csv.output);
        const std::vector<std::string> keys = schema.documented_keys(table);
        CHECK(records.at(0) == keys);
        REQUIRE(rows.size() == kModels.size() + 1);
        for (const auto& row : rows) {
            REQUIRE(keys_of(row) == keys);
            for (const std::string& key : keys) {
                INFO(key << ": " << row.at(key).dump());
                CHECK(has_type(row.at(key), schema.types.at(key)));
            }
            CHECK(row.at("budget") == "100%");  // a TEXT column, as the database stores it
            CHECK(row.at("tf32") == false);
            CHECK(row.at("dropout") == 0.0);
            const bool runs = row.at("dtype") == "fp32";
            // A host cell predicts no device memory: 0 bytes, not a missing value.
            if (runs) CHECK(row.at("predicted_alloc_bytes") == 0);
            CHECK(row.at("predicted_peak_bytes").is_null());  // no --calibration
            CHECK(row.at("reason").is_null() == runs);
            if (std::string(table) == "list") CHECK(row.at("runnable_here") == runs);
        }
        std::set<std::string> models;
        for (const auto& row : rows) models.insert(row.at("model").get<std::string>());
        CHECK(models == std::set<std::string>(kModels.begin(), kModels.end()));
    }
}

namespace {

// The timed iterations of the ok cells of `model` in `db`, pooled, in increasing order.
std::vector<double> pooled_latencies(const std::string& db, const std::string& model) {
    Database results(db, Database::Mode::read_only);
    auto st = results.prepare("SELECT i.latency_ms FROM iterations i JOIN cells c USING (cell_id)"
                              " WHERE c.model = ? AND c.status = 'ok' AND i.phase = 'timed' ORDER BY i.latency_ms");
    st.bind(1, model);
    std::vector<double> ms;
    while (st.step()) ms.push_back(st.real(0));
    return ms;
}

double median_of_sorted(const std::vector<double>& v) {
    const std::size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

TEST_CASE("compare --format json and csv: the identifying axes and the documented keys, numbers unrounded",
          "[cli][format][compare]") {
    test::TempDir tmp;
    const auto matrix = tmp.file("m.toml"), a = tmp.file("a.db"), b = formats_db();
    test::write_file(matrix, formats_matrix());
    // A measures each workload twice, with two seeds and more iterations: one workload, its timed
    // iterations pooled.
    REQUIRE(test::run_sweetspot("run '" + matrix + "' --db '" + a + "' --set seed=1,2 --set iterations=3").exit_code == 0);
    const auto as_json = test::run_sweetspot("compare '" + a + "' '" + b + "' --format json");
    const auto as_csv = test::run_sweetspot("compare '" + a + "' '" + b + "' --format csv");
    INFO(as_json.output);
    REQUIRE(as_json.exit_code == 0);
    REQUIRE(as_csv.exit_code == 0);
    const auto rows = json::parse(as_json.output);
    const auto records = parse_csv(as_csv.output);
    Database results(a, Database::Mode::read_only);
    Schema schema(results);
    const std::vector<std::string> keys = schema.documented_keys("compare");
    CHECK(records.at(0) == keys);
    REQUIRE(rows.size() == kModels.size());  // the fp16 cells were not measured
    REQUIRE(records.size() == rows.size() + 1);
    std::set<std::string> models;
    for (const auto& row : rows) {
        INFO(row.dump());
        REQUIRE(keys_of(row) == keys);
        for (const std::string& key : keys) CHECK(has_type(row.at(key), schema.types.at(key)));
        const std::string model = row.at("model").get<std::string>();
        models.insert(model);
        CHECK(row.at("a_timed_iterations") == 6);
        CHECK(row.at("b_timed_iterations") == 2);
        const double median_a = row.at("a_latency_median_ms").get<double>(), median_b = row.at("b_latency_median_ms").get<double>();
        const std::vector<double> ms_a = pooled_latencies(a, model), ms_b = pooled_latencies(b, model);
        CHECK(median_a == Catch::Approx(median_of_sorted(ms_a)).epsilon(1e-12));
        CHECK(median_b == Catch::Approx(median_of_sorted(ms_b)).epsilon(1e-12));
        // B ÷ A: the median of the 12 ratios of a B iteration to an A iteration, on a log scale (the
        // geometric mean of the 6th and the 7th); the change as printed, every digit.
        std::vector<double> ratios;
        for (const double b_ms : ms_b)
            for (const double a_ms : ms_a) ratios.push_back(b_ms / a_ms);
        std::sort(ratios.begin(), ratios.end());
        const double ratio = row.at("b_over_a").get<double>();
        CHECK(ratio == Catch::Approx(std::sqrt(ratios[5] * ratios[6])).epsilon(1e-12));
        CHECK(row.at("change_pct").get<double>() == 100.0 * (ratio - 1.0));
        const double p = row.at("p_value").get<double>();
        CHECK((p > 0 && p <= 1));
        // 6 and 2 iterations: 2 / C(8, 2) = 0.071 at best, above alpha; no arrangement is as rare as
        // 0.025 (1/28 = 0.036), so no 95 % interval either.
        CHECK(row.at("verdict") == "untestable");
        CHECK(row.at("b_over_a_ci_low").is_null());
        CHECK(row.at("b_over_a_ci_high").is_null());
    }
    CHECK(models == std::set<std::string>(kModels.begin(), kModels.end()));
}

TEST_CASE("summary --format json of a version-2 database: the same keys, the later axes at what its cells had",
          "[cli][format][store]") {
    test::TempDir tmp;
    const auto path = tmp.file("v2.db");
    {
        Store s = Store::open(path);
        RunInfo info;
        info.started_at = "2026-01-01T00:00:00Z";
        const Matrix m = parse_matrix("[defaults]\nmodel = \"tiny\"\nwarmups = 0\niterations = 2\n", "test");
        CellOutcome o;
        o.status = CellStatus::ok;
        o.set<"started_at">("2026-01-01T00:00:00Z");
        o.set<"finished_at">("2026-01-01T00:00:01Z");
        o.timed_ms = {1.0, 3.0};
        record_outcome(s, s.begin_run(info), 0, m.cells.at(0), o);
        downgrade_schema(s.db(), 2);
    }
    const auto as_json = test::run_sweetspot("summary '" + path + "' --format json");
    INFO(as_json.output);
    REQUIRE(as_json.exit_code == 0);
    const auto rows = json::parse(as_json.output);
    REQUIRE(rows.size() == 1);
    Store current = Store::open(tmp.file("current.db"));
    Schema schema(current.db());
    CHECK(keys_of(rows[0]) == schema.documented_keys("summary"));
    // What cells before each column had (results/README.md, `cells`).
    CHECK(rows[0].at("dropout") == 0.0);
    CHECK(rows[0].at("repeat") == 1);
    CHECK(rows[0].at("launch") == "kernels");
    CHECK(rows[0].at("max_noise_pct") == 0.0);
    CHECK(rows[0].at("max_iterations") == 0);
    CHECK(rows[0].at("max_time_s") == 0.0);
    CHECK(rows[0].at("spread_pct").is_null());
    CHECK(rows[0].at("noisy") == false);
    CHECK(rows[0].at("warnings").is_null());
    CHECK(rows[0].at("latency_median_ms") == 2.0);  // the median of 1 and 3 ms
    CHECK(rows[0].at("timed_iterations") == 2);
}
