#include "harness/cli/cell_list.hpp"

#include <set>
#include <string>
#include <variant>

#include "harness/cli/table.hpp"
#include "harness/matrix/axes.hpp"
#include "harness/measure/cell_exec.hpp"
#include "kernels/model/model_fields.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {
namespace {

// "tiny: 2 layers, hidden 64, 4 heads, vocab 512, 128 positions, ln_eps 1e-05, gpt2 family, ... (built in)";
// a field listed only where set (kModelFields) where it is not at its default.
std::string shape_line(const ModelConfig& m) {
    std::string line = m.name + ": ";
    for (const ModelField& f : kModelFields) {
        if (!f.listed_always && model_field_text(f, m) == model_field_text(f, ModelConfig{})) continue;
        const std::string_view phrase = f.phrase;
        const std::size_t at = phrase.find("{}");
        line += std::string(phrase.substr(0, at)) + model_field_display(f, m) + std::string(phrase.substr(at + 2)) + ", ";
    }
    return line + human_bytes(static_cast<double>(n_params(m)) * 4) + " of fp32 parameters" +
           (find_builtin_model(m.name) ? " (built in)" : " (the matrix's [[models]])");
}

}  // namespace

std::vector<const Axis*> add_axis_columns(DataTable& table, const std::vector<CellParams>& cells) {
    std::vector<const Axis*> added;
    for (const Axis& axis : axes()) {
        const bool listed = shows_axis(axis, axis.in_list, cells);
        if (!listed && !axis.has_column()) continue;
        const bool number = axis.column_type == Axis::Column::integer || axis.column_type == Axis::Column::real ||
                            axis.written == Axis::Written::integer_or_string;
        table.add_column(listed ? std::string(axis.name) : "", std::string(axis.column),
                         number ? TextTable::Align::right : TextTable::Align::left);
        added.push_back(&axis);
    }
    return added;
}

void print_cell_list(const std::vector<CellParams>& cells, const std::optional<FixedCost>& fixed, TableFormat format,
                     std::ostream& out) {
    using A = TextTable::Align;
    DataTable t;
    t.add_column("#", "cell_index", A::right);
    t.add_column("key", "cell_key");
    t.add_column("sweep", "sweep");
    const std::vector<const Axis*> shown = add_axis_columns(t, cells);
    t.add_column("weight bytes", "weight_bytes", A::right);
    // People see the prediction asked for; other tools have both columns, the peak null without --calibration.
    t.add_column(fixed ? "" : "predicted device", "predicted_alloc_bytes", A::right);
    t.add_column(fixed ? "predicted peak" : "", "predicted_peak_bytes", A::right);
    t.add_column("runnable here", "runnable_here");
    t.add_column("", "reason");
    bool unmeasured_managed = false;  // a UVM cell without a peak: the driver's overhead is not measured
    for (std::size_t i = 0; i < cells.size(); ++i) {
        const CellParams& c = cells[i];
        std::vector<Field> row = {integer_field(static_cast<std::int64_t>(i)), text_field(c.key()), text_field(c.sweep)};
        for (const Axis* axis : shown) row.push_back(axis_field(*axis, c));
        row.push_back(bytes_field(c.weight_bytes()));
        // As `estimate` predicts them: none on the device for a host cell.
        Field alloc = missing_field(), peak = missing_field();
        if (cell_impossible_reason(c).empty()) {
            const MemoryEstimate e = estimate_memory(c);
            alloc = bytes_field(e.device_total());
            if (fixed) {
                peak = bytes_field(e.device_total() == 0 ? 0 : predicted_peak(c, e, *fixed));
                unmeasured_managed = unmeasured_managed || std::holds_alternative<std::monostate>(peak.value);
            }
        }
        row.push_back(alloc);
        row.push_back(peak);
        const std::string why = cell_unavailable_reason(c);
        row.push_back({why.empty() ? "yes" : "no: " + why, why.empty()});
        row.push_back(why.empty() ? missing_field() : text_field(why));
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
