#include "harness/cli/gradients_command.hpp"

#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "harness/cli/logits_command.hpp"
#include "harness/cli/npy.hpp"
#include "harness/system/exit_codes.hpp"
#include "kernels/compute/dropout.hpp"
#include "kernels/compute/cpu_train_step.hpp"
#include "kernels/compute/reference_gradients.hpp"
#include "kernels/compute/reference_optimizer.hpp"
#include "kernels/model/checkpoint_weights.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "kernels/model/weight_layout.hpp"

namespace sweetspot {
namespace {

namespace fs = std::filesystem;

// A folder beside `output`, renamed to it once every file is in; removed if that never happens.
class StagingFolder {
public:
    explicit StagingFolder(const fs::path& output)
        : output_(output), path_(output.string() + ".partial-" + std::to_string(getpid())) {
        fs::create_directories(path_);
    }
    ~StagingFolder() {
        std::error_code ec;
        if (!published_) fs::remove_all(path_, ec);
    }
    StagingFolder(const StagingFolder&) = delete;
    StagingFolder& operator=(const StagingFolder&) = delete;
    const fs::path& path() const { return path_; }
    void publish() {
        fs::rename(path_, output_);
        published_ = true;
    }

private:
    fs::path output_, path_;
    bool published_ = false;
};

}  // namespace

int write_gradients(const GradientsRequest& r, std::ostream& report) {
    if (r.output.empty()) throw std::invalid_argument("an output folder (-o DIR) is needed");
    if (std::error_code ec; fs::exists(r.output, ec))
        throw std::invalid_argument(r.output + " exists; the gradients go into a new folder");
    if (r.tokens.empty()) throw std::invalid_argument("--tokens is needed (one sequence of token ids each)");
    if (r.targets.size() != r.tokens.size())
        throw std::invalid_argument("one --targets per --tokens is needed, got " + std::to_string(r.targets.size()) +
                                    " for " + std::to_string(r.tokens.size()));
    const ModelConfig model = resolve_model(r.model, r.weights);
    const std::size_t seq = r.tokens.front().size();
    if (seq > static_cast<std::size_t>(model.max_positions))
        throw std::invalid_argument(std::to_string(seq) + " tokens per sequence, but model '" + model.name + "' allows " +
                                    std::to_string(model.max_positions));
    const auto tokens = flatten_sequences(r.tokens, seq, model, "--tokens", "token");
    const auto targets = flatten_sequences(r.targets, seq, model, "--targets", "target");
    if (r.dropout < 0.0f || r.dropout >= 1.0f) throw std::invalid_argument("--dropout must be in [0, 1)");

    const WeightLayout layout = WeightLayout::for_model(model);
    std::vector<std::vector<float>> units;
    for (const UnitLayout& unit : layout.units) units.emplace_back(static_cast<std::size_t>(unit.numel));
    if (r.weights == "synthetic") {
        for (std::size_t u = 0; u < units.size(); ++u) fill_synthetic_unit(model, layout, static_cast<int>(u), r.seed, units[u]);
    } else {
        const Gpt2Checkpoint checkpoint = Gpt2Checkpoint::open(r.weights, model);
        for (std::size_t u = 0; u < units.size(); ++u) checkpoint.fill_unit(static_cast<int>(u), units[u]);
    }
    std::vector<const float*> pointers;
    for (const auto& unit : units) pointers.push_back(unit.data());

    const int batch = static_cast<int>(r.tokens.size());
    const ReferenceGradients grads = reference_gradients(model, layout, pointers, tokens, targets, batch,
                                                         static_cast<int>(seq), Dropout{r.dropout, r.seed});
    // The step a training cell makes from these gradients, in float64.
    UnitValues clipped = grads.units, updated;
    for (const auto& unit : units) updated.emplace_back(unit.begin(), unit.end());
    const TrainSettings step;
    reference_clip_gradients(clipped, r.max_grad_norm);
    AdamWState state;
    reference_adamw_step(layout, updated, clipped, state,
                         {.lr = step.lr, .beta1 = step.beta1, .beta2 = step.beta2, .eps = step.eps,
                          .weight_decay = r.weight_decay});

    StagingFolder staging(r.output);
    fs::create_directory(staging.path() / "updated");
    const std::vector<std::int64_t> one = {1};
    write_npy((staging.path() / "loss.npy").string(), std::span<const double>(&grads.loss, 1), one);
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        for (const TensorSpec& tensor : layout.units[u].tensors) {
            const auto n = static_cast<std::size_t>(tensor.numel);
            write_npy((staging.path() / (tensor.name + ".npy")).string(),
                      std::span<const double>(grads.units[u].data() + tensor.offset, n), tensor.shape);
            write_npy((staging.path() / "updated" / (tensor.name + ".npy")).string(),
                      std::span<const double>(updated[u].data() + tensor.offset, n), tensor.shape);
        }
    }
    staging.publish();
    report << r.output << ": the loss (" << grads.loss << "), the float64 gradients and the weights after one step of "
           << n_params(model)
           << " parameters of model '" << model.name << "' (weights " << r.weights << ") over " << batch << " × " << seq
           << " targets" << (r.dropout > 0 ? ", dropout " + std::to_string(r.dropout) : "") << "\n";
    return kExitOk;
}

}  // namespace sweetspot
