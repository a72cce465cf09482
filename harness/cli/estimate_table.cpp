#include "harness/cli/estimate_table.hpp"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include "base/number_text.hpp"
#include "harness/cli/cell_list.hpp"
#include "harness/cli/table.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/memory_estimate.hpp"
#include "harness/measure/packed_fit.hpp"

namespace sweetspot {
namespace {

// A table whose rows start with the cell's number and its axes, then `columns`: (header, key).
struct EstimateTable {
    DataTable table;
    std::vector<const Axis*> axes;
    std::size_t columns = 0;

    EstimateTable(const std::vector<CellParams>& cells, std::initializer_list<std::pair<const char*, const char*>> numbers)
        : columns(numbers.size()) {
        table.add_column("#", "cell_index", TextTable::Align::right);
        axes = add_axis_columns(table, cells);
        for (const auto& [header, key] : numbers) table.add_column(header, key, TextTable::Align::right);
    }
    // The cell's number and its axes: the start of its row.
    std::vector<Field> row_start(std::size_t i, const CellParams& c) const {
        std::vector<Field> row = {integer_field(static_cast<std::int64_t>(i))};
        for (const Axis* axis : axes) row.push_back(axis_field(*axis, c));
        return row;
    }
};

}  // namespace

void print_memory_estimates(const std::vector<CellParams>& cells, const std::optional<FixedCost>& fixed,
                            TableFormat format, std::ostream& out) {
    // For other tools every term has a column, the peaks null without --calibration; people see
    // the peaks only with it.
    const char* peak = fixed ? "peak" : "";
    const char* host_peak = fixed ? "host peak" : "";
    EstimateTable cell_table(cells, {{"weights", "predicted_device_weight_bytes"},
                                 {"training state", "predicted_training_state_bytes"},
                                 {"activations", "predicted_activation_bytes"},
                                 {"scores", "predicted_scores_bytes"},
                                 {"workspace", "predicted_workspace_bytes"},
                                 {"device", "predicted_alloc_bytes"},
                                 {peak, "predicted_peak_bytes"},
                                 {"kept managed", "predicted_kept_managed_bytes"},
                                 {"pinned host", "predicted_pinned_host_bytes"},
                                 {"managed", "predicted_managed_bytes"},
                                 {"host", "predicted_host_alloc_bytes"},
                                 {host_peak, "predicted_host_peak_bytes"}});
    DataTable& t = cell_table.table;
    t.add_column("note", "");
    t.add_column("", "managed_activations");
    t.add_column("", "reason");
    for (std::size_t i = 0; i < cells.size(); ++i) {
        const CellParams& c = cells[i];
        std::vector<Field> row = cell_table.row_start(i, c);
        const std::string why = cell_impossible_reason(c);
        if (!why.empty()) {
            row.insert(row.end(), cell_table.columns, Field{"", std::monostate{}});
            row.push_back({"cannot run: " + why, std::monostate{}});
            row.push_back(missing_field());
            row.push_back(text_field(why));
            t.add_row(std::move(row));
            continue;
        }
        const MemoryEstimate e = estimate_memory(c);
        std::optional<std::int64_t> peak_bytes, host_peak_bytes;
        if (fixed) {
            peak_bytes = e.device_total() == 0 ? 0 : predicted_peak(c, e, *fixed);
            if (e.device_total() != 0) host_peak_bytes = predicted_host_peak(c, e, *fixed, true);
        }
        using Bytes = std::optional<std::int64_t>;
        for (const Bytes bytes : std::initializer_list<Bytes>{e.weights, e.training_state, e.activations, e.scores,
                                                              e.workspace, e.device_total(),
                                                              peak_bytes, e.retained_managed, e.pinned_total(), e.managed,
                                                              e.host_total(true), host_peak_bytes})
            row.push_back(bytes_field(bytes));
        row.push_back({e.managed_activations ? "activations are managed memory" : "", std::monostate{}});
        row.push_back({"", e.managed_activations});
        row.push_back(missing_field());
        t.add_row(std::move(row));
    }
    t.print(out, format);
    if (format != TableFormat::text) return;
    out << "\ndevice = weights + training state + activations + scores + workspace: what sweetspot allocates on the\n"
           "GPU. training state: a training cell's gradients, fp32 master weights and AdamW moments, where its\n"
           "backend keeps them on the GPU (the gradients only where AdamW runs on the host); its activations are\n"
           "what the step keeps for the backward and its scratch.\n"
           "A training cell too large for the full check first makes a prefix step beside the weights (its buffers\n"
           "and one unit's scratch), freed before its own step allocates: device counts the larger of the two.\n";
    out << "kept managed: managed weights beyond those the backend keeps that the driver still holds on the GPU\n"
           "at the cell's peak (the pages it migrated stay until the process ends; they are evictable).\n";
    if (fixed) {
        const auto b = [](std::int64_t n) { return human_bytes(static_cast<double>(n)); };
        out << "peak = device + kept managed + " << b(fixed->largest)
            << " for the CUDA context and the libraries, the largest measured on " << fixed->gpu << " ("
            << fixed->driver << ") over " << fixed->cells << " cells (smallest " << b(fixed->smallest) << ")";
        if (fixed->per_pinned_byte > 0)
            out << " + " << sweetspot::fixed(fixed->per_pinned_byte * 100.0, 3)
                << " % of the pinned host memory (the GPU's page tables for it)";
        for (const auto& [dtype, bytes] : fixed->managed_overhead)
            out << " + " << b(bytes) << " the driver holds for managed " << enum_name(dtype) << " weights";
        out << ", as measured there";
        if (fixed->managed_overhead.empty()) out << " ('-' for uvm and uvm-prefetch: no such cell has measured it yet)";
        out << ".\nhost peak = host + what the cell's process holds besides, measured there per backend, kernels (mode, "
               "dtype, variant) and whether the check's reference was computed:";
        for (const auto& [key, bytes] : fixed->host_process)
            out << "\n  " << enum_name(key.backend) << " " << key.kernels << (key.reference ? " with reference " : " ")
                << b(bytes);
        if (fixed->host_process.empty()) out << " none yet ('-'; cells of schema 9 on measure it)";
        out << ".\n";
    } else {
        out << "The CUDA context and the libraries' memory come on top (fixed per GPU and driver; --calibration DB\n"
               "measures them from a results database of that GPU and adds a peak column).\n";
    }
    out << "host: the weights' host memory (the page-locked copy, the managed pages kept on the host, or the host\n"
           "backend's fp32 units), a training state kept on the host (the host backend's gradients and moments, or\n"
           "AdamW's master weights, moments and page-locked staging where it runs on the host, the staging also in\n"
           "pinned host), the logits held on the host, and the check's host reference forward (its largest\n"
           "unit in fp32 and its activations), which the first cell of a large model's workload runs and later\n"
           "cells skip, reusing the reference the database keeps.\n";
    out << "weights: what the backend holds on the GPU (resident units and streaming slots; for uvm and\n"
           "uvm-prefetch, the managed weights it lets the GPU keep). scores: the attention's [batch, heads,\n"
           "seq, seq] buffer, which flash_attention does without.\n";
}

void print_fits(const std::vector<CellParams>& cells, std::int64_t capacity, const FixedCost& fixed, TableFormat format,
                std::ostream& out) {
    // People see the packed cells' answer in tokens where there are any; other tools always have it.
    const bool packed = std::any_of(cells.begin(), cells.end(), fits_in_tokens);
    EstimateTable cell_table(cells, {{"largest batch", "largest_batch"},
                                 {"peak at it", "largest_batch_peak_bytes"},
                                 {"largest seq", "largest_seq"},
                                 {"peak there", "largest_seq_peak_bytes"},
                                 {packed ? "largest packed tokens" : "", "largest_packed_tokens"},
                                 {packed ? "peak at them" : "", "largest_packed_tokens_peak_bytes"},
                                 {"smallest budget", "smallest_budget_bytes"}});
    DataTable& t = cell_table.table;
    for (std::size_t i = 0; i < cells.size(); ++i) {
        const CellParams& c = cells[i];
        std::vector<Field> row = cell_table.row_start(i, c);
        const Fit f = fit(c, capacity, fixed);
        const auto peak_at = [&](int batch, int seq) {
            CellParams at = c;
            at.batch = batch;
            at.seq = seq;
            return bytes_field(predicted_need(estimate_memory(at), fixed));
        };
        // People read at which seq the batch is, and at which batch the seq; other tools have the
        // cell's own seq and batch in their columns.
        const auto largest = [](std::optional<int> n, const std::string& at) -> Field {
            if (!n) return {"none", std::monostate{}};
            return {std::to_string(*n) + " (" + at + ")", std::int64_t{*n}};
        };
        row.push_back(largest(f.batch, "seq " + std::to_string(c.seq)));
        row.push_back(f.batch ? peak_at(*f.batch, c.seq) : missing_field());
        row.push_back(largest(f.seq, "batch " + std::to_string(c.batch)));
        row.push_back(f.seq ? peak_at(c.batch, *f.seq) : missing_field());
        if (!fits_in_tokens(c)) {
            row.insert(row.end(), 2, missing_field());
        } else if (const std::optional<std::int64_t> tokens = largest_packed_tokens(c, capacity, fixed); !tokens) {
            row.push_back({"none", std::monostate{}});
            row.push_back(missing_field());
        } else {
            const BatchShape batch = packed_batch(c, *tokens);
            row.push_back({std::to_string(*tokens) + " (" + std::to_string(batch.batch()) + " sequences)", *tokens});
            row.push_back(bytes_field(predicted_need(estimate_memory(c, batch), fixed)));
        }
        row.push_back(bytes_field(f.smallest_budget));
        t.add_row(std::move(row));
    }
    t.print(out, format);
    if (format != TableFormat::text) return;
    out << "\nFitting " << human_bytes(static_cast<double>(capacity)) << ", of which "
        << human_bytes(static_cast<double>(fixed.largest)) << " are the CUDA context and the libraries (measured on "
        << fixed.gpu << ", " << fixed.driver << "). The largest batch keeps the cell's seq and budget; the largest seq\n"
           "keeps its batch and budget (up to the model's positions). The smallest budget is the least device memory\n"
           "for weights at which the cell's backend still runs (resident units and streaming slots), whatever it\n"
           "costs in time; '-' for a backend that keeps every weight resident.\n";
    if (std::any_of(cells.begin(), cells.end(), [](const CellParams& c) { return !c.lengths.is_fixed(); }))
        out << "For a cell whose lengths are drawn, the largest seq is the largest clip of its lengths (each at most\n"
               "seq, drawn from the same seed), so its batch's longest sequence may be shorter than that.\n";
    if (packed)
        out << "A packed cell (lengths drawn, packing packed) also has the largest packed tokens: the most real tokens\n"
               "one packed batch may hold, the sequences the cell draws in order, the last one cut short (a packed\n"
               "batch's rows are its tokens, so its memory follows them, not how many sequences they come in).\n";
}

}  // namespace sweetspot
