#include "harness/store/history.hpp"

#include <algorithm>
#include <map>

#include "harness/matrix/cell.hpp"
#include "harness/system/system_info.hpp"

namespace sweetspot {
namespace {

// The rows of the `cells` of `schema` that `condition` (on c, binding ?2) selects, into this
// database's cell_history under `key`: every column, whatever the schema version adds, and the
// iterations, as JSON.
template <class Value>
void insert_history(Database& db, const std::string& key, const std::string& schema, const std::string& condition,
                    const Value& value) {
    // json_object for the first columns, then json_insert for the rest: an SQL function takes
    // at most 127 arguments, and `cells` has more columns than that makes pairs.
    constexpr int kPairsPerCall = 60;
    std::vector<std::string> names;
    auto columns = db.prepare("SELECT name FROM pragma_table_info('cells', ?) ORDER BY cid");
    columns.bind(1, schema);
    while (columns.step()) names.push_back(columns.text(0));
    std::string row;
    for (std::size_t first = 0; first < names.size(); first += kPairsPerCall) {
        std::string pairs;
        for (std::size_t i = first; i < std::min(names.size(), first + kPairsPerCall); ++i)
            pairs += ", " + (first == 0 ? "'" + names[i] + "'" : "'$.\"" + names[i] + "\"'") + ", c.\"" + names[i] + "\"";
        row = first == 0 ? "json_object(" + pairs.substr(2) + ")" : "json_insert(" + row + pairs + ")";
    }
    db.prepare("INSERT INTO cell_history (cell_key, superseded_at, cell, iterations)"
               " SELECT ?3, ?1, " + row + ","
               " (SELECT json_group_array(json_object('phase', i.phase, 'iteration', i.iteration, 'latency_ms', i.latency_ms))"
               "  FROM " + schema + ".iterations i WHERE i.cell_id = c.cell_id)"
               " FROM " + schema + ".cells c WHERE " + condition)
        .bind(1, utc_timestamp())
        .bind(2, value)
        .bind(3, key)
        .run();
}

}  // namespace

void keep_as_history(Database& db, const std::string& key, const std::string& schema) {
    insert_history(db, key, schema, "c.cell_key = ?2", key);
}

void rekey_cells(Database& db) {
    struct Stored {
        std::int64_t cell_id;
        std::string old_key, canonical;
    };
    // By the key their parameters have now, in the order they were recorded (cell_id).
    std::map<std::string, std::vector<Stored>> by_key;
    auto cells = db.prepare("SELECT cell_id, cell_key, canonical FROM cells ORDER BY cell_id");
    while (cells.step()) {
        const CellParams c = CellParams::from_canonical(cells.text(2));
        by_key[c.key()].push_back({cells.int64(0), cells.text(1), c.canonical()});
    }
    // Everything moves to its new key through a temporary one ("rekey:" + key), so that a new
    // key cannot meet a row still under an old one midway.
    for (const auto& [key, stored] : by_key) {
        const std::string moving = "rekey:" + key;
        for (const Stored& cell : stored)
            db.prepare("UPDATE cell_history SET cell_key = ?1 WHERE cell_key = ?2").bind(1, moving).bind(2, cell.old_key).run();
        // Cells that differed only in what the key no longer covers are one cell now: the last
        // recorded stays, the earlier ones become its history, as a rerun would have made them.
        for (std::size_t i = 0; i + 1 < stored.size(); ++i) {
            insert_history(db, moving, "main", "c.cell_id = ?2", stored[i].cell_id);
            db.prepare("DELETE FROM cells WHERE cell_id = ?").bind(1, stored[i].cell_id).run();
        }
        db.prepare("UPDATE cells SET cell_key = ?1, canonical = ?2 WHERE cell_id = ?3")
            .bind(1, moving)
            .bind(2, stored.back().canonical)
            .bind(3, stored.back().cell_id)
            .run();
    }
    db.exec("UPDATE cell_history SET cell_key = substr(cell_key, 7) WHERE cell_key LIKE 'rekey:%';"
            "UPDATE cells SET cell_key = substr(cell_key, 7) WHERE cell_key LIKE 'rekey:%';");
}


}  // namespace sweetspot
