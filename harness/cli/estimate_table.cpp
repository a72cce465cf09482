#include "harness/cli/estimate_table.hpp"

#include <initializer_list>
#include <stdexcept>
#include <string>

#include "harness/cli/cell_list.hpp"
#include "harness/cli/table.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/memory_estimate.hpp"
#include "kernels/model/number_text.hpp"

namespace sweetspot {
namespace {

// A table whose rows start with the cell's number and the axes `list` shows, then `columns`.
TextTable cell_table(const std::vector<const Axis*>& shown, std::initializer_list<const char*> columns) {
    TextTable t;
    t.add_column("#", TextTable::Align::right);
    for (const Axis* axis : shown) t.add_column(std::string(axis->name), column_align(*axis));
    for (const char* h : columns) t.add_column(h, TextTable::Align::right);
    return t;
}

// The cell's number and its shown axes: the start of its row.
std::vector<std::string> row_start(std::size_t i, const CellParams& c, const std::vector<const Axis*>& shown) {
    std::vector<std::string> row = {std::to_string(i)};
    for (const Axis* axis : shown) row.push_back(axis->shown_text(c));
    return row;
}

}  // namespace

void print_memory_estimates(const std::vector<CellParams>& cells, const std::optional<FixedCost>& fixed,
                            TableFormat format, std::ostream& out) {
    const auto bytes_or_dash = [&](std::int64_t bytes) { return size_cell(bytes, format); };
    const std::vector<const Axis*> shown = listed_axes(cells);
    TextTable t = cell_table(shown, {"weights", "activations", "scores", "workspace", "device"});
    if (fixed) t.add_column("peak", TextTable::Align::right);
    t.add_column("kept managed", TextTable::Align::right);
    for (const char* h : {"pinned host", "managed", "host"}) t.add_column(h, TextTable::Align::right);
    if (fixed) t.add_column("host peak", TextTable::Align::right);
    t.add_column("note");
    for (std::size_t i = 0; i < cells.size(); ++i) {
        const CellParams& c = cells[i];
        std::vector<std::string> row = row_start(i, c, shown);
        const std::string why = cell_impossible_reason(c);
        if (!why.empty()) {
            row.insert(row.end(), fixed ? 11 : 9, "");
            row.push_back("cannot run: " + why);
            t.add_row(std::move(row));
            continue;
        }
        const MemoryEstimate e = estimate_memory(c);
        row.insert(row.end(), {bytes_or_dash(e.weights), bytes_or_dash(e.activations), bytes_or_dash(e.scores),
                               bytes_or_dash(e.workspace), bytes_or_dash(e.device_total())});
        if (fixed) {
            const std::optional<std::int64_t> peak = e.device_total() == 0 ? 0 : predicted_peak(c, e, *fixed);
            row.push_back(peak ? bytes_or_dash(*peak) : "-");
        }
        row.push_back(bytes_or_dash(e.retained_managed));
        row.insert(row.end(), {bytes_or_dash(e.pinned_host), bytes_or_dash(e.managed), bytes_or_dash(e.host_total(true))});
        if (fixed) {
            const std::optional<std::int64_t> host = e.device_total() == 0 ? std::nullopt : predicted_host_peak(c, e, *fixed, true);
            row.push_back(host ? bytes_or_dash(*host) : "-");
        }
        row.push_back(e.managed_activations ? "activations are managed memory" : "");
        t.add_row(std::move(row));
    }
    t.print(out, format);
    if (format != TableFormat::text) return;
    out << "\ndevice = weights + activations + scores + workspace: what sweetspot allocates on the GPU.\n";
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
        out << ".\nhost peak = host + what the cell's process holds besides, measured there per backend:";
        for (const auto& [backend, bytes] : fixed->host_process) out << " " << enum_name(backend) << " " << b(bytes);
        if (fixed->host_process.empty()) out << " none yet ('-'; cells of schema 9 on measure it)";
        out << ".\n";
    } else {
        out << "The CUDA context and the libraries' memory come on top (fixed per GPU and driver; --calibration DB\n"
               "measures them from a results database of that GPU and adds a peak column).\n";
    }
    out << "host: the weights' host memory (the page-locked copy, the managed pages kept on the host, or the host\n"
           "backend's fp32 units), the logits held on the host, and the check's host reference forward (its largest\n"
           "unit in fp32 and its activations), which the first cell of a large model's workload runs and later\n"
           "cells skip, reusing the reference the database keeps.\n";
    out << "weights: what the backend holds on the GPU (resident units and streaming slots; for uvm and\n"
           "uvm-prefetch, the managed weights it lets the GPU keep). scores: the attention's [batch, heads,\n"
           "seq, seq] buffer, which flash_attention does without.\n";
}

void print_fits(const std::vector<CellParams>& cells, std::int64_t capacity, const FixedCost& fixed, TableFormat format,
                std::ostream& out) {
    const std::vector<const Axis*> shown = listed_axes(cells);
    TextTable t = cell_table(shown, {"largest batch", "peak at it", "largest seq", "peak there", "smallest budget"});
    for (std::size_t i = 0; i < cells.size(); ++i) {
        const CellParams& c = cells[i];
        std::vector<std::string> row = row_start(i, c, shown);
        const Fit f = fit(c, capacity, fixed);
        const auto peak_at = [&](int batch, int seq) {
            CellParams at = c;
            at.batch = batch;
            at.seq = seq;
            return size_cell(predicted_need(estimate_memory(at), fixed), format);
        };
        // For people the batch says at which seq, and the seq at which batch; for other tools the
        // numbers alone (the cell's own seq and batch are its columns).
        const bool people = format == TableFormat::text || format == TableFormat::markdown;
        const std::string none = people ? "none" : "-";
        row.push_back(f.batch ? std::to_string(*f.batch) + (people ? " (seq " + std::to_string(c.seq) + ")" : "") : none);
        row.push_back(f.batch ? peak_at(*f.batch, c.seq) : "-");
        row.push_back(f.seq ? std::to_string(*f.seq) + (people ? " (batch " + std::to_string(c.batch) + ")" : "") : none);
        row.push_back(f.seq ? peak_at(c.batch, *f.seq) : "-");
        row.push_back(f.smallest_budget ? size_cell(*f.smallest_budget, format) : "-");
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
}

}  // namespace sweetspot
