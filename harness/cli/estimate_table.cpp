#include "harness/cli/estimate_table.hpp"

#include <stdexcept>
#include <string>

#include "harness/cli/cell_list.hpp"
#include "harness/cli/table.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/memory_estimate.hpp"
#include "kernels/model/number_text.hpp"

namespace sweetspot {
namespace {

std::string bytes_or_dash(std::int64_t bytes) { return bytes == 0 ? "-" : human_bytes(static_cast<double>(bytes)); }

}  // namespace

void print_memory_estimates(const std::vector<CellParams>& cells, const std::optional<FixedCost>& fixed,
                            std::ostream& out) {
    const std::vector<const Axis*> shown = listed_axes(cells);
    using A = TextTable::Align;
    TextTable t;
    t.add_column("#", A::right);
    for (const Axis* axis : shown) t.add_column(std::string(axis->name), column_align(*axis));
    for (const char* h : {"weights", "activations", "scores", "workspace", "device"}) t.add_column(h, A::right);
    if (fixed) t.add_column("peak", A::right);
    for (const char* h : {"pinned host", "managed"}) t.add_column(h, A::right);
    t.add_column("note");
    for (std::size_t i = 0; i < cells.size(); ++i) {
        const CellParams& c = cells[i];
        std::vector<std::string> row = {std::to_string(i)};
        for (const Axis* axis : shown) row.push_back(axis->shown_text(c));
        const std::string why = cell_unsupported_reason(c);
        if (!why.empty()) {
            row.insert(row.end(), fixed ? 8 : 7, "");
            row.push_back("cannot run: " + why);
            t.add_row(std::move(row));
            continue;
        }
        const MemoryEstimate e = estimate_memory(c);
        row.insert(row.end(), {bytes_or_dash(e.weights), bytes_or_dash(e.activations), bytes_or_dash(e.scores),
                               bytes_or_dash(e.workspace), bytes_or_dash(e.device_total())});
        if (fixed) row.push_back(bytes_or_dash(e.device_total() == 0 ? 0 : e.device_total() + fixed->largest));
        row.insert(row.end(), {bytes_or_dash(e.pinned_host), bytes_or_dash(e.managed)});
        row.push_back(e.managed_activations ? "activations are managed memory" : "");
        t.add_row(std::move(row));
    }
    t.print(out);
    out << "\ndevice = weights + activations + scores + workspace: what sweetspot allocates on the GPU.\n";
    if (fixed) {
        out << "peak = device + " << human_bytes(static_cast<double>(fixed->largest))
            << " for the CUDA context and the libraries, the largest measured on " << fixed->gpu << " ("
            << fixed->driver << ") over " << fixed->cells << " cells (smallest "
            << human_bytes(static_cast<double>(fixed->smallest)) << ").\n";
    } else {
        out << "The CUDA context and the libraries' memory come on top (fixed per GPU and driver; --calibration DB\n"
               "measures them from a results database of that GPU and adds a peak column).\n";
    }
    out << "weights: what the backend holds on the GPU (resident units and streaming slots; for uvm and\n"
           "uvm-prefetch, the managed weights it lets the GPU keep). scores: the attention's [batch, heads,\n"
           "seq, seq] buffer, which flash_attention does without.\n";
}

}  // namespace sweetspot
