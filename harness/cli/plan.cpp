#include "harness/cli/plan.hpp"

#include <algorithm>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "base/number_text.hpp"
#include "harness/cli/cell_columns.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/measure/cell_exec.hpp"

namespace sweetspot {

namespace {

bool is_choice_in_workload_role(const Axis& axis) { return axis.name == "variant" || axis.name == "batch"; }

// The axes whose values a workload's cells share: the workload axes less the plan's choices.
std::vector<const Axis*> workload_axes() {
    std::vector<const Axis*> out;
    for (const Axis& axis : axes())
        if (axis.role == Axis::Role::workload && !is_choice_in_workload_role(axis)) out.push_back(&axis);
    return out;
}

// The axes the plan chooses among, in the registry's order.
std::vector<const Axis*> choice_axes() {
    std::vector<const Axis*> out;
    for (const Axis& axis : axes())
        if (axis.role == Axis::Role::placement || is_choice_in_workload_role(axis)) out.push_back(&axis);
    return out;
}

std::string workload_key(const CellParams& c, const std::vector<const Axis*>& shared) {
    std::string key;
    for (const Axis* axis : shared) key += std::string(axis->name) + '=' + axis->get(c) + '\n';
    return key;
}

// The best cell's choices as people read them: its backend and variant, its batch, and each other
// choice whose value differs among the workload's cells ("device, flash_attention, batch 16, budget 50%").
std::string setting_text(const CellParams& c, const std::vector<CellParams>& cells, const WorkloadPlan& plan) {
    std::string text;
    for (const Axis* axis : choice_axes()) {
        const bool named_alone = axis->name == "backend" || axis->name == "variant";
        bool varies = axis->name == "batch" || named_alone;
        for (const PlanCell& p : plan.cells)
            varies = varies || axis->get(cells[p.cell]) != axis->get(c);
        if (!varies) continue;
        if (!text.empty()) text += ", ";
        text += named_alone ? axis->shown_text(c) : std::string(axis->name) + ' ' + axis->shown_text(c);
    }
    return text;
}

std::string cell_numbers(const std::vector<std::size_t>& indices, const WorkloadPlan& plan) {
    std::string text;
    for (const std::size_t i : indices) text += (text.empty() ? "#" : ", #") + std::to_string(plan.cells[i].cell);
    return text;
}

}  // namespace

std::map<std::string, MeasuredCell> measured_cells(Database& results) {
    std::map<std::string, MeasuredCell> out;
    auto st = results.prepare(
        "SELECT cell_key, tokens_per_s, gpu_peak_bytes FROM cells WHERE status = 'ok' AND tokens_per_s IS NOT NULL");
    while (st.step()) {
        MeasuredCell m;
        m.tokens_per_s = st.real(1);
        if (!st.is_null(2)) m.gpu_peak_bytes = st.int64(2);
        out[st.text(0)] = m;
    }
    return out;
}

std::vector<WorkloadPlan> plan_workloads(const std::vector<CellParams>& cells, const std::optional<FixedCost>& fixed,
                                         const std::map<std::string, MeasuredCell>& measured,
                                         const PlanLimits& limits) {
    const std::vector<const Axis*> shared = workload_axes();
    std::vector<WorkloadPlan> plans;
    std::map<std::string, std::size_t> by_key;
    for (std::size_t i = 0; i < cells.size(); ++i) {
        const CellParams& c = cells[i];
        const auto [where, added] = by_key.try_emplace(workload_key(c, shared), plans.size());
        if (added) plans.emplace_back();
        PlanCell p;
        p.cell = i;
        p.cannot_run = cell_impossible_reason(c);
        if (p.cannot_run.empty()) {
            const MemoryEstimate e = estimate_memory(c);
            if (e.device_total() != 0) {
                if (!fixed)
                    throw std::invalid_argument("cell #" + std::to_string(i) + " uses a GPU: its need includes the CUDA "
                                                "context and libraries' memory, measured in a calibration database");
                p.need = predicted_need(e, *fixed);
                p.host_need = predicted_host_peak(c, e, *fixed, true);
            } else {
                p.host_need = e.host_total(true);
            }
            p.fits = p.need <= limits.device_bytes &&
                     (!limits.host_bytes || (p.host_need && *p.host_need <= *limits.host_bytes));
            if (const auto m = measured.find(c.key()); m != measured.end()) p.measured = m->second;
        }
        plans[where->second].cells.push_back(std::move(p));
    }
    for (WorkloadPlan& plan : plans) {
        const auto faster = [&](std::optional<std::size_t> than, std::size_t i) {
            return !than || plan.cells[i].measured->tokens_per_s > plan.cells[*than].measured->tokens_per_s;
        };
        for (std::size_t i = 0; i < plan.cells.size(); ++i) {
            const PlanCell& p = plan.cells[i];
            if (!p.cannot_run.empty()) continue;
            if (p.fits && !p.measured) plan.unmeasured.push_back(i);
            if (p.fits && p.measured && faster(plan.best, i)) plan.best = i;
            if (!p.fits && p.measured && faster(plan.beyond, i)) plan.beyond = i;
        }
        if (plan.beyond && plan.best && !faster(plan.best, *plan.beyond)) plan.beyond.reset();
        const bool any_fits = std::any_of(plan.cells.begin(), plan.cells.end(), [](const PlanCell& p) { return p.fits; });
        if (!any_fits) {
            for (std::size_t i = 0; i < plan.cells.size(); ++i)
                if (plan.cells[i].cannot_run.empty() && (!plan.smallest || plan.cells[i].need < plan.cells[*plan.smallest].need))
                    plan.smallest = i;
        }
    }
    return plans;
}

void print_plan(const std::vector<CellParams>& cells, const std::vector<WorkloadPlan>& plans, const PlanLimits& limits,
                TableFormat format, std::ostream& out) {
    DataTable t;
    t.add_column("#", "workload_index", TextTable::Align::right);
    // People see the workload axes whose value differs from the default or between workloads;
    // other tools get every one with a column.
    std::vector<const Axis*> shown;
    for (const Axis* axis : workload_axes()) {
        const bool show = format == TableFormat::text ? shows_axis(*axis, axis->in_list, cells) : axis->has_column();
        if (!show) continue;
        shown.push_back(axis);
        t.add_column(std::string(axis->name), format == TableFormat::text ? "" : std::string(axis->column));
    }
    t.add_column("settings", "settings", TextTable::Align::right);
    t.add_column("fit", "fitting", TextTable::Align::right);
    t.add_column("best measured setting that fits", "best_setting");
    t.add_column("", "best_cell_index");
    t.add_column("", "best_cell_key");
    t.add_column("tokens/s", "best_tokens_per_s", TextTable::Align::right);
    t.add_column("need", "best_predicted_need_bytes", TextTable::Align::right);
    t.add_column("measured peak", "best_gpu_peak_bytes", TextTable::Align::right);
    t.add_column("fit, not measured", "unmeasured_cells");
    t.add_column("faster beyond the limit", "beyond_setting");
    t.add_column("", "beyond_tokens_per_s");
    t.add_column("", "beyond_predicted_need_bytes");
    for (std::size_t w = 0; w < plans.size(); ++w) {
        const WorkloadPlan& plan = plans[w];
        const CellParams& first = cells[plan.cells.front().cell];
        std::vector<Field> row = {integer_field(static_cast<std::int64_t>(w))};
        for (const Axis* axis : shown) row.push_back(axis_field(*axis, first));
        const auto runnable = std::count_if(plan.cells.begin(), plan.cells.end(),
                                            [](const PlanCell& p) { return p.cannot_run.empty(); });
        const auto fitting = std::count_if(plan.cells.begin(), plan.cells.end(), [](const PlanCell& p) { return p.fits; });
        row.push_back(integer_field(runnable));
        row.push_back(integer_field(fitting));
        if (plan.best) {
            const PlanCell& best = plan.cells[*plan.best];
            const CellParams& c = cells[best.cell];
            row.push_back(text_field("#" + std::to_string(best.cell) + " " + setting_text(c, cells, plan)));
            row.push_back(integer_field(static_cast<std::int64_t>(best.cell)));
            row.push_back(text_field(c.key()));
            row.push_back(number_field(best.measured->tokens_per_s, 0));
            row.push_back(bytes_field(best.need));
            row.push_back(bytes_field(best.measured->gpu_peak_bytes));
        } else {
            std::string why = fitting == 0 ? "nothing fits" : "none of those that fit was measured";
            if (plan.smallest) why += " (least need: #" + std::to_string(plan.cells[*plan.smallest].cell) + ", " +
                                      human_bytes(static_cast<double>(plan.cells[*plan.smallest].need)) + ")";
            if (runnable == 0) why = "no cell can run";
            row.push_back({why, std::monostate{}});
            for (int i = 0; i < 5; ++i) row.push_back(missing_field());
        }
        row.push_back(plan.unmeasured.empty() ? Field{"", std::monostate{}} : text_field(cell_numbers(plan.unmeasured, plan)));
        if (plan.beyond) {
            const PlanCell& beyond = plan.cells[*plan.beyond];
            row.push_back(text_field("#" + std::to_string(beyond.cell) + " " +
                                     setting_text(cells[beyond.cell], cells, plan) + ": " +
                                     fixed(beyond.measured->tokens_per_s, 0) + " tokens/s, needs " +
                                     human_bytes(static_cast<double>(beyond.need))));
            row.push_back(number_field(beyond.measured->tokens_per_s, 0));
            row.push_back(bytes_field(beyond.need));
        } else {
            row.insert(row.end(), {Field{"", std::monostate{}}, missing_field(), missing_field()});
        }
        t.add_row(std::move(row));
    }
    t.print(out, format);
    if (format != TableFormat::text) return;
    out << "\nWithin " << human_bytes(static_cast<double>(limits.device_bytes)) << " of GPU memory";
    if (limits.host_bytes) out << " and " << human_bytes(static_cast<double>(*limits.host_bytes)) << " of host memory";
    out << ".\nA workload is what its cells compute (the workload axes but variant and batch); a setting is\n"
           "the rest: backend, budget and the other placement axes, variant and batch. fit: the settings whose\n"
           "predicted need (estimate's device memory with the CUDA context and libraries) is within the limit.\n"
           "The best is the fastest of those the results database measured (tokens/s of an ok cell with the same\n"
           "key); the cells that fit and were not measured are listed (#: the cell's number in `list`), since one of\n"
           "them may be faster. 'faster beyond the limit': a measured setting that is faster but does not fit.\n";
}

}  // namespace sweetspot
