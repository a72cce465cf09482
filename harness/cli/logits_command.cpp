#include "harness/cli/logits_command.hpp"

#include <charconv>
#include <stdexcept>

#include "harness/matrix/cell.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/cli/npy.hpp"
#include "harness/system/exit_codes.hpp"
#include "harness/system/output_file.hpp"
#include "kernels/model/checkpoint_weights.hpp"

namespace sweetspot {
namespace {

// The cell a sweep would run for this request: one timed iteration, nothing traced.
CellParams logits_cell(const LogitsRequest& r, const ModelConfig& model, int batch, int seq) {
    CellParams c;
    c.sweep = "logits";
    c.model = model;
    c.weights = r.weights;
    c.backend = r.backend;
    c.dtype = r.dtype;
    c.variant = r.variant;
    c.tf32 = r.tf32;
    c.split_tf32 = r.split_tf32;
    c.batch = batch;
    c.seq = seq;
    c.seed = r.seed;
    c.warmups = 0;
    c.iterations = 1;
    c.trace_iterations = 0;
    return c;
}

}  // namespace

ModelConfig resolve_model(const std::string& name, const std::string& weights) {
    if (!name.empty()) {
        if (auto m = find_builtin_model(name)) return *m;
        std::string names;
        for (const auto& m : builtin_models()) names += (names.empty() ? "" : ", ") + m.name;
        throw std::invalid_argument("unknown model '" + name + "'; built-in models: " + names);
    }
    if (weights != "synthetic") {
        if (auto m = checkpoint_model(weights)) return *m;
        throw std::invalid_argument("--model is needed: the checkpoint " + weights + " has no config.json to take the shape from");
    }
    throw std::invalid_argument("--model is needed with synthetic weights");
}

std::vector<std::int32_t> flatten_sequences(const std::vector<std::vector<std::int32_t>>& sequences, std::size_t seq,
                                            const ModelConfig& model, const std::string& option, const std::string& noun) {
    std::vector<std::int32_t> ids;
    for (const auto& sequence : sequences) {
        if (sequence.size() != seq)
            throw std::invalid_argument("every " + option + " sequence must have the same length (" + std::to_string(seq) + ")");
        for (const auto id : sequence) {
            if (id < 0 || id >= model.vocab_size)
                throw std::invalid_argument(noun + " " + std::to_string(id) + " is outside the vocabulary of model '" +
                                            model.name + "' (" + std::to_string(model.vocab_size) + " tokens)");
            ids.push_back(id);
        }
    }
    return ids;
}

std::vector<std::int32_t> parse_token_list(std::string_view text) {
    std::vector<std::int32_t> ids;
    std::size_t i = 0;
    while (i < text.size()) {
        if (text[i] == ',' || text[i] == ' ') {
            ++i;
            continue;
        }
        std::int32_t id = 0;
        const auto [end, ec] = std::from_chars(text.data() + i, text.data() + text.size(), id);
        if (ec != std::errc() || (end != text.data() + text.size() && *end != ',' && *end != ' '))
            throw std::invalid_argument("--tokens expects token ids separated by commas, got '" + std::string(text) + "'");
        ids.push_back(id);
        i = static_cast<std::size_t>(end - text.data());
    }
    if (ids.empty()) throw std::invalid_argument("--tokens got no token ids");
    return ids;
}

int write_logits(const LogitsRequest& r, std::ostream& report) {
    if (r.output.empty()) throw std::invalid_argument("an output file (-o FILE.npy) is needed");
    const ModelConfig model = resolve_model(r.model, r.weights);
    const bool given = !r.tokens.empty();
    const int batch = given ? static_cast<int>(r.tokens.size()) : r.batch;
    const int seq = given ? static_cast<int>(r.tokens.front().size()) : r.seq;
    if (batch < 1 || seq < 1) throw std::invalid_argument("--batch and --seq must be at least 1");
    if (static_cast<std::int64_t>(batch) * seq > AxisLimits::tokens)
        throw std::invalid_argument(std::to_string(batch) + " sequences of " + std::to_string(seq) + " tokens are more than the " +
                                    std::to_string(AxisLimits::tokens) + " tokens a forward may have");
    if (seq > model.max_positions)
        throw std::invalid_argument(std::to_string(seq) + " tokens per sequence, but model '" + model.name + "' allows " +
                                    std::to_string(model.max_positions));
    const std::vector<std::int32_t> tokens = flatten_sequences(r.tokens, static_cast<std::size_t>(seq), model, "--tokens", "token");

    const CellParams cell = logits_cell(r, model, batch, seq);
    if (const std::string why = cell_unavailable_reason(cell); !why.empty())
        throw std::invalid_argument(cell.label() + ": " + why);

    std::vector<float> logits;
    const CellOutcome outcome = measure_cell(
        cell, {.allow_oversubscription = r.allow_oversubscription, .collect = false, .tokens = tokens, .logits = &logits});
    if (const auto rel_err = outcome.get<"check_rel_err">())
        report << "checked against the " << outcome.get<"check_reference">().value_or("reference") << ": relative error "
               << *rel_err << " (tolerance " << outcome.get<"check_tolerance">().value_or(0) << ")\n";
    // Logits that are not finite or fail the check are no result: a script that reads the file
    // without looking at the exit code must find the file it had before, or none.
    if (outcome.status != CellStatus::ok) {
        report << "sweetspot logits: " << enum_name(outcome.status) << ": " << outcome.reason << "; " << r.output
               << " not written\n";
        return kExitFailed;
    }
    const std::vector<std::int64_t> shape = {batch, seq, model.vocab_size};
    OutputFile file(r.output);
    write_npy(file.temp_path(), logits, shape);
    file.commit();
    report << r.output << ": float32 [" << batch << ", " << seq << ", " << model.vocab_size << "] logits of model '"
           << model.name << "' (weights " << r.weights << ") on backend " << enum_name(r.backend) << " in "
           << enum_name(r.dtype) << (given ? "" : ", random token ids from seed " + std::to_string(r.seed)) << "\n";
    return kExitOk;
}

}  // namespace sweetspot
