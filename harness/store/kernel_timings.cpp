#include "harness/store/kernel_timings.hpp"

#include <map>
#include <tuple>

#include "harness/store/sql_values.hpp"

namespace sweetspot {

void insert_kernel_timing(Database& db, std::int64_t run_id, const KernelTiming& timing) {
    for (std::size_t i = 0; i < timing.ms.size(); ++i) {
        insert_row(db, "kernel_timings",
                   {{"run_id", sql(run_id)},
                    {"op", sql(timing.op)},
                    {"dtype", sql(timing.dtype)},
                    {"shape", sql(timing.shape)},
                    {"flops", sql(timing.flops)},
                    {"bytes", sql(timing.bytes)},
                    {"iteration", sql(static_cast<std::int64_t>(i))},
                    {"ms", sql(timing.ms[i])}});
    }
}

std::vector<KernelTiming> read_kernel_timings(Database& db, std::optional<std::int64_t> run_id,
                                              const std::optional<std::string>& matrix) {
    std::vector<KernelTiming> timings;
    if (!has_table(db, "kernel_timings")) return timings;
    auto st = db.prepare(
        "SELECT op, dtype, shape, flops, bytes, ms FROM kernel_timings"
        " WHERE (?1 IS NULL OR run_id = ?1)"
        " AND (?2 IS NULL OR run_id IN (SELECT run_id FROM runs WHERE matrix_name = ?2))"
        " ORDER BY rowid");
    st.bind(1, run_id);
    st.bind(2, matrix);
    std::map<std::tuple<std::string, std::string, std::string>, std::size_t> index;
    while (st.step()) {
        const auto [it, added] = index.emplace(std::tuple(st.text(0), st.text(1), st.text(2)), timings.size());
        if (added) timings.push_back({st.text(0), st.text(1), st.text(2), st.real(3), st.real(4), {}});
        timings[it->second].ms.push_back(st.real(5));
    }
    return timings;
}

}  // namespace sweetspot
