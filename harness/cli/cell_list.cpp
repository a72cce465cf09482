#include "harness/cli/cell_list.hpp"

#include <cstdio>
#include <set>
#include <string>

#include "harness/cli/table.hpp"
#include "harness/matrix/axes.hpp"
#include "backends/backend_registry.hpp"
#include "harness/measure/cell_exec.hpp"

namespace sweetspot {
namespace {

// "tiny: 2 layers, hidden 64, 2 heads, vocab 512, 128 positions, ln_eps 1e-05, ... (built in)"
std::string shape_line(const ModelConfig& m) {
    char eps[32];
    std::snprintf(eps, sizeof eps, "%g", static_cast<double>(m.ln_eps));  // the float's shortest form, not 9.99999975e-06
    return m.name + ": " + std::to_string(m.n_layer) + " layers, hidden " + std::to_string(m.n_embd) + ", " +
           std::to_string(m.n_head) + " heads, vocab " + std::to_string(m.vocab_size) + ", " +
           std::to_string(m.max_positions) + " positions, ln_eps " + eps + ", " +
           human_bytes(static_cast<double>(m.n_params()) * 4) + " of fp32 parameters" +
           (find_builtin_model(m.name) ? " (built in)" : " (the matrix's [[models]])");
}

}  // namespace

TextTable::Align column_align(const Axis& axis) {
    return axis.column_type == Axis::Column::integer || axis.column_type == Axis::Column::real ||
                   axis.written == Axis::Written::integer_or_string
               ? TextTable::Align::right
               : TextTable::Align::left;
}

std::vector<const Axis*> listed_axes(const std::vector<CellParams>& cells) {
    std::vector<const Axis*> shown;
    for (const Axis& axis : axes())
        if (shows_axis(axis, axis.in_list, cells)) shown.push_back(&axis);
    return shown;
}

void print_cell_list(const std::vector<CellParams>& cells, const std::optional<FixedCost>& fixed, TableFormat format,
                     std::ostream& out) {
    const std::vector<const Axis*> shown = listed_axes(cells);

    using A = TextTable::Align;
    TextTable t;
    t.add_column("#", A::right);
    t.add_column("key");
    t.add_column("sweep");
    for (const Axis* axis : shown) t.add_column(std::string(axis->name), column_align(*axis));
    t.add_column("weight bytes", A::right);
    t.add_column(fixed ? "predicted peak" : "predicted device", A::right);
    t.add_column("runnable here");
    bool unmeasured_managed = false;  // a UVM cell without a peak: the driver's overhead is not measured
    for (std::size_t i = 0; i < cells.size(); ++i) {
        const CellParams& c = cells[i];
        std::vector<std::string> row = {std::to_string(i), c.key(), c.sweep};
        for (const Axis* axis : shown) row.push_back(axis->shown_text(c));
        const std::string why = cell_unavailable_reason(c);
        row.push_back(size_cell(c.weight_bytes(), format));
        std::string predicted = "-";
        if (backend_traits(c.backend).needs_gpu && cell_impossible_reason(c).empty()) {
            const MemoryEstimate e = estimate_memory(c);
            const std::optional<std::int64_t> peak = fixed ? predicted_peak(c, e, *fixed) : e.device_total();
            if (peak) predicted = size_cell(*peak, format);
            else unmeasured_managed = true;
        }
        row.push_back(predicted);
        row.push_back(why.empty() ? "yes" : "no: " + why);
        t.add_row(std::move(row));
    }
    t.print(out, format);
    if (format != TableFormat::text) return;
    if (unmeasured_managed)
        out << "\nNo peak for uvm and uvm-prefetch cells: no such cell of this GPU and driver has measured the memory\n"
               "the driver holds for managed weights yet.\n";

    std::set<std::string> seen;
    out << "\nmodels\n";
    for (const CellParams& c : cells)
        if (seen.insert(c.model.name).second) out << "  " << shape_line(c.model) << "\n";
}

}  // namespace sweetspot
