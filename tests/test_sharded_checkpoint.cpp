// Sharded Hugging Face checkpoints (model.safetensors.index.json and the shards it names): split
// two or three ways, a checkpoint loads as the same tensors written to one file do, and every
// disagreement between the index and its shards is refused with a message naming it.
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_exception.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/model/checkpoint_error.hpp"
#include "kernels/model/checkpoint_weights.hpp"
#include "safetensors_fixture.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::MessageMatches;
using namespace sweetspot::test;

namespace {

namespace fs = std::filesystem;
using Units = std::vector<std::vector<float>>;

const ModelConfig kModel{"shard_tiny", 2, 32, 4, 96, 24, 1e-5f};

const WeightLayout& layout() {
    static const WeightLayout layout = WeightLayout::for_model(kModel);
    return layout;
}

// Each element `base` plus its unit plus its place in the unit over 2^14, exact in fp32: a tensor
// read from the wrong shard or offset shows. Padding between tensors is zero, as fill_unit leaves it.
Units numbered_units(float base = 0.0f) {
    Units units;
    for (std::size_t u = 0; u < layout().units.size(); ++u) {
        auto& unit = units.emplace_back(static_cast<std::size_t>(layout().units[u].numel), 0.0f);
        for (const TensorSpec& t : layout().units[u].tensors)
            for (std::int64_t i = t.offset; i < t.offset + t.numel; ++i)
                unit[static_cast<std::size_t>(i)] = base + static_cast<float>(u) + static_cast<float>(i) / 16384.0f;
    }
    return units;
}

struct Shard {
    std::string file;
    std::vector<FixtureTensor> tensors;
};

// A sharded checkpoint as save_pretrained writes one: the tensors in order, cut into shards of
// about equal count, and an index mapping each tensor to its shard.
struct ShardedFixture {
    std::vector<Shard> shards;
    std::vector<std::pair<std::string, std::string>> weight_map;  // tensor → shard file
    std::optional<std::uint64_t> total_size;
    std::string index_text;  // when not empty, written instead of the index built from the above

    ShardedFixture(const std::vector<FixtureTensor>& tensors, std::size_t count) {
        std::uint64_t bytes = 0;
        for (std::size_t s = 0; s < count; ++s) {
            char name[64];
            std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, count);
            shards.push_back({name, {}});
        }
        for (std::size_t t = 0; t < tensors.size(); ++t) {
            Shard& shard = shards[t * count / tensors.size()];
            shard.tensors.push_back(tensors[t]);
            weight_map.emplace_back(tensors[t].name, shard.file);
            bytes += tensors[t].bytes.size();
        }
        total_size = bytes;
    }

    std::string index() const {
        if (!index_text.empty()) return index_text;
        // Of the names written here, only a shard name with a backslash needs escaping.
        const auto escaped = [](std::string name) {
            for (std::size_t at = name.find('\\'); at != std::string::npos; at = name.find('\\', at + 2)) name.insert(at, 1, '\\');
            return name;
        };
        std::string s = "{\n  \"metadata\": {";
        if (total_size) s += "\"total_size\": " + std::to_string(*total_size);
        s += "},\n  \"weight_map\": {";
        for (std::size_t i = 0; i < weight_map.size(); ++i)
            s += (i ? ",\n    \"" : "\n    \"") + weight_map[i].first + "\": \"" + escaped(weight_map[i].second) + "\"";
        return s + "\n  }\n}\n";
    }

    // The checkpoint directory `name` under `tmp`, with the config.json of kModel.
    std::string write(const TempDir& tmp, const std::string& name) const {
        const std::string dir = tmp.file(name);
        fs::create_directories(dir);
        for (const Shard& shard : shards) write_file(dir + "/" + shard.file, test::safetensors_file(shard.tensors));
        write_file(dir + "/model.safetensors.index.json", index());
        write_file(dir + "/config.json", test::gpt2_config_json(kModel));
        return dir;
    }
};

std::vector<FixtureTensor> fixture_tensors(const Gpt2FixtureOptions& o = {.lm_head = true}, float base = 0.0f) {
    return test::gpt2_tensors(layout(), numbered_units(base), o);
}

// Every unit of the checkpoint at `path`, as fill_unit writes it.
Units loaded_units(const std::string& path) {
    const auto checkpoint = Gpt2Checkpoint::open(path, kModel);
    Units units;
    for (const UnitLayout& unit : layout().units) {
        auto& out = units.emplace_back(static_cast<std::size_t>(unit.numel), -1.0f);
        checkpoint.fill_unit(static_cast<int>(units.size() - 1), out);
    }
    return units;
}

// The checkpoint `fixture` writes, once `change` has been made to it, must fail to open with a
// message holding `message` and naming the index.
void check_refused(const std::function<void(ShardedFixture&)>& change, const std::string& message) {
    TempDir tmp;
    ShardedFixture fixture(fixture_tensors(), 3);
    change(fixture);
    const std::string dir = fixture.write(tmp, "sharded");
    CHECK_THROWS_MATCHES(Gpt2Checkpoint::open(dir, kModel), CheckpointError,
                         MessageMatches(ContainsSubstring(dir + "/model.safetensors.index.json: ") &&
                                        ContainsSubstring(message)));
}

}  // namespace

TEST_CASE("a checkpoint in 2 or 3 shards loads as its tensors in one file do", "[checkpoint][shards]") {
    TempDir tmp;
    // F32 with its own lm_head loads as exactly the numbered units; BF16 with a tied head is
    // compared with the same tensors in one model.safetensors.
    for (const Gpt2FixtureOptions& o : {Gpt2FixtureOptions{.lm_head = true}, Gpt2FixtureOptions{.dtype = "BF16"}}) {
        const auto tensors = fixture_tensors(o);
        const std::string single = tmp.file("single-" + o.dtype);
        fs::create_directories(single);
        write_file(single + "/model.safetensors", test::safetensors_file(tensors));
        write_file(single + "/config.json", test::gpt2_config_json(kModel));
        for (const std::size_t count : {std::size_t{2}, std::size_t{3}}) {
            INFO(o.dtype << " in " << count << " shards");
            const ShardedFixture fixture(tensors, count);
            for (const Shard& shard : fixture.shards) CHECK_FALSE(shard.tensors.empty());
            const std::string dir = fixture.write(tmp, o.dtype + "-" + std::to_string(count));
            const Units units = loaded_units(dir);
            CHECK(units == loaded_units(single));
            if (o.dtype == "F32") CHECK(units == numbered_units());
            const auto declared = checkpoint_model(dir);
            REQUIRE(declared.has_value());
            CHECK(declared->n_layer == 2);
            CHECK(declared->n_embd == 32);
        }
    }
}

TEST_CASE("a directory with both model.safetensors and an index loads model.safetensors, as transformers does",
          "[checkpoint][shards]") {
    TempDir tmp;
    const std::string dir = ShardedFixture(fixture_tensors(), 2).write(tmp, "both");
    write_file(dir + "/model.safetensors", test::safetensors_file(fixture_tensors({.lm_head = true}, 100.0f)));
    CHECK(loaded_units(dir) == numbered_units(100.0f));
}

TEST_CASE("sharded checkpoints: an index that is not JSON is refused", "[checkpoint][shards]") {
    check_refused([](ShardedFixture& f) { f.index_text = "{\"weight_map\": {\"wte.weight\": "; }, "the shard index is not valid JSON");
}

TEST_CASE("sharded checkpoints: an index without a weight_map is refused", "[checkpoint][shards]") {
    check_refused([](ShardedFixture& f) { f.index_text = "{\"metadata\": {\"total_size\": 0}}"; },
                  "the shard index has no \"weight_map\"");
}

TEST_CASE("sharded checkpoints: a shard the index names that is not there is refused", "[checkpoint][shards]") {
    check_refused([](ShardedFixture& f) { f.shards.pop_back(); },
                  "shard 'model-00003-of-00003.safetensors' is missing (no ");
}

TEST_CASE("sharded checkpoints: a shard name with a directory part is refused", "[checkpoint][shards]") {
    for (const std::string name : {"../model-00001-of-00003.safetensors", "sub/model-00001-of-00003.safetensors",
                                   "sub\\model-00001-of-00003.safetensors", ".."}) {
        INFO(name);
        check_refused([&](ShardedFixture& f) { f.weight_map.front().second = name; },
            "shard '" + name + "' (of tensor 'transformer.wte.weight') is not a plain file name");
    }
}

TEST_CASE("sharded checkpoints: a tensor in another shard than the index says is refused", "[checkpoint][shards]") {
    check_refused([](ShardedFixture& f) { f.weight_map.front().second = "model-00002-of-00003.safetensors"; },
                  "the index maps tensor 'transformer.wte.weight' to shard 'model-00002-of-00003.safetensors', but it is "
                  "in shard 'model-00001-of-00003.safetensors'");
}

TEST_CASE("sharded checkpoints: a tensor in two shards is refused", "[checkpoint][shards]") {
    check_refused([](ShardedFixture& f) { f.shards.back().tensors.push_back(f.shards.front().tensors.front()); },
                  "tensor 'transformer.wte.weight' is in two shards, 'model-00001-of-00003.safetensors' and "
                  "'model-00003-of-00003.safetensors'");
}

TEST_CASE("sharded checkpoints: a tensor the index does not list is refused", "[checkpoint][shards]") {
    check_refused([](ShardedFixture& f) { f.weight_map.erase(f.weight_map.begin()); },
                  "shard 'model-00001-of-00003.safetensors' holds tensor 'transformer.wte.weight', which the index's "
                  "weight_map does not list");
}

TEST_CASE("sharded checkpoints: a tensor the index lists but no shard holds is refused", "[checkpoint][shards]") {
    check_refused([](ShardedFixture& f) { f.weight_map.emplace_back("transformer.h.9.ln_1.weight", f.shards[1].file); },
                  "the index maps tensor 'transformer.h.9.ln_1.weight' to shard 'model-00002-of-00003.safetensors', "
                  "which does not hold it");
}

TEST_CASE("sharded checkpoints: a total_size other than the tensors' bytes is refused", "[checkpoint][shards]") {
    // fp32 elements of every tensor of the model, lm_head included: counted from the layout.
    std::uint64_t bytes = 0;
    for (const UnitLayout& unit : layout().units)
        for (const TensorSpec& t : unit.tensors) bytes += 4 * static_cast<std::uint64_t>(t.numel);
    check_refused([&](ShardedFixture& f) { f.total_size = bytes + 1; },
                  "metadata.total_size is " + std::to_string(bytes + 1) + " bytes, but the shards' tensors have " +
                      std::to_string(bytes));
}
