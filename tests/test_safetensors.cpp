// Hugging Face GPT-2 checkpoints: safetensors fixtures written here load into exactly the units
// they were made from, files transformers wrote give its logits, every kind of bad file is
// refused with a message naming the problem (and exit code 2 from the binary), the header parser
// survives fuzzing, and `sweetspot logits` writes a valid .npy of the host forward.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <cstring>
#include <utility>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <random>

#include "backends/backend_registry.hpp"
#include "harness/measure/cell_exec.hpp"
#include "harness/measure/cell_weights.hpp"
#include "harness/cli/logits_command.hpp"
#include "harness/cli/npy.hpp"
#include "harness/store/store.hpp"
#include "kernels/model/checkpoint_error.hpp"
#include "kernels/model/checkpoint_weights.hpp"
#include "kernels/compute/cpu_forward.hpp"
#include "kernels/model/gpt2/gpt2_tensors.hpp"
#include "kernels/model/safetensors.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "safetensors_fixture.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using sweetspot::test::FixtureTensor;
using sweetspot::test::Gpt2FixtureOptions;
using sweetspot::test::run_sweetspot;
using sweetspot::test::TempDir;
using sweetspot::test::write_file;

namespace {

namespace fs = std::filesystem;
using Units = std::vector<std::vector<float>>;

// Small enough that every test, and ten thousand fuzzed loads, take milliseconds.
const ModelConfig kModel{"ckpt_tiny", 2, 32, 4, 96, 24, 1e-5f};

bool contains(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

Units synthetic_units(const ModelConfig& m, std::uint64_t seed) {
    const auto layout = WeightLayout::for_model(m);
    Units units;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        auto& buf = units.emplace_back(static_cast<std::size_t>(layout.units[u].numel));
        fill_synthetic_unit(m, layout, static_cast<int>(u), seed, buf);
    }
    return units;
}

// What a checkpoint made from `units` must load as: the stored dtype's values, and wte in place
// of lm_head when the checkpoint ties them.
Units expected_units(const ModelConfig& m, Units units, const Gpt2FixtureOptions& o) {
    const auto layout = WeightLayout::for_model(m);
    if (!o.lm_head) {
        const auto& wte = layout.units.front().tensors[gpt2::embed_tensor::wte];
        const auto& lm_head = layout.units.back().tensors[gpt2::head_tensor::lm_head];
        std::copy_n(units.front().begin() + wte.offset, wte.numel, units.back().begin() + lm_head.offset);
    }
    const DType dtype = o.dtype == "F16" ? DType::fp16 : o.dtype == "BF16" ? DType::bf16 : DType::fp32;
    for (auto& u : units) round_through_dtype(u, dtype);
    return units;
}

std::string checkpoint_file(const ModelConfig& m, const Units& units, const Gpt2FixtureOptions& o = {}) {
    return test::safetensors_file(test::gpt2_tensors(WeightLayout::for_model(m), units, o));
}

// A save_pretrained-style directory `name` under `tmp`.
std::string write_checkpoint_dir(const TempDir& tmp, const std::string& name, const std::string& tensors_file,
                                 const std::string& config_json) {
    const std::string dir = tmp.file(name);
    fs::create_directories(dir);
    write_file(dir + "/model.safetensors", tensors_file);
    if (!config_json.empty()) write_file(dir + "/config.json", config_json);
    return dir;
}

Units load_units(const std::string& path, const ModelConfig& m) {
    const auto checkpoint = Gpt2Checkpoint::open(path, m);
    const auto layout = WeightLayout::for_model(m);
    Units units;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        auto& buf = units.emplace_back(static_cast<std::size_t>(layout.units[u].numel), -1.0f);
        checkpoint.fill_unit(static_cast<int>(u), buf);
    }
    return units;
}

// The message a load fails with, or "loaded".
std::string load_error(const std::string& path, const ModelConfig& m = kModel) {
    try {
        Gpt2Checkpoint::open(path, m);
    } catch (const CheckpointError& e) {
        return e.what();
    }
    return "loaded";
}

// The same for a file's bytes, through the parser and the GPT-2 matching alone.
std::string bytes_error(const std::string& file, const ModelConfig& m = kModel) {
    const auto bytes = std::as_bytes(std::span(file.data(), file.size()));
    try {
        const auto tensors = parse_safetensors(bytes, "fixture.safetensors");
        Gpt2Weights weights(tensors, m, "fixture.safetensors");
    } catch (const CheckpointError& e) {
        return e.what();
    }
    return "loaded";
}

class UnitsSource final : public LayerSource {
public:
    explicit UnitsSource(const Units& units) : units_(units) {}
    const void* acquire(int unit) override { return units_.at(static_cast<std::size_t>(unit)).data(); }
    void release(int) override {}

private:
    const Units& units_;
};

std::vector<float> host_logits(const ModelConfig& m, LayerSource& weights, const std::vector<std::int32_t>& tokens, int batch) {
    const int seq = static_cast<int>(tokens.size()) / batch;
    CpuForward forward(m, WeightLayout::for_model(m), BatchShape::rectangular(batch, seq));
    std::vector<float> logits(tokens.size() * static_cast<std::size_t>(m.vocab_size));
    forward.run(weights, tokens, logits);
    return logits;
}

std::vector<FixtureTensor> base_tensors(const Gpt2FixtureOptions& o = {}) {
    return test::gpt2_tensors(WeightLayout::for_model(kModel), synthetic_units(kModel, 7), o);
}

FixtureTensor& tensor_named(std::vector<FixtureTensor>& tensors, const std::string& name) {
    for (auto& t : tensors)
        if (t.name == name) return t;
    throw std::logic_error("no fixture tensor " + name);
}

}  // namespace

TEST_CASE("a GPT-2 checkpoint loads into exactly the units it was made from", "[checkpoint]") {
    TempDir tmp;
    const Units units = synthetic_units(kModel, 7);
    int n = 0;
    for (const std::string dtype : {"F32", "F16", "BF16"}) {
        for (const bool prefix : {true, false}) {
            for (const bool lm_head : {false, true}) {
                const Gpt2FixtureOptions o{dtype, prefix, lm_head, /*attention_buffers=*/prefix};
                INFO(dtype << (prefix ? " transformer.-prefixed" : " bare") << (lm_head ? ", own lm_head" : ", tied lm_head"));
                const auto dir = write_checkpoint_dir(tmp, "c" + std::to_string(n++), checkpoint_file(kModel, units, o),
                                                      test::gpt2_config_json(kModel));
                // Bit for bit: F32 as stored, F16 and BF16 exactly their values widened to fp32.
                CHECK(load_units(dir, kModel) == expected_units(kModel, units, o));
            }
        }
    }
}

TEST_CASE("a bare .safetensors file loads, with the shape from the model when no config.json is beside it", "[checkpoint]") {
    TempDir tmp;
    const Units units = synthetic_units(kModel, 3);
    write_file(tmp.file("weights.safetensors"), checkpoint_file(kModel, units));
    CHECK(load_units(tmp.file("weights.safetensors"), kModel) == expected_units(kModel, units, {}));
    CHECK_FALSE(checkpoint_model(tmp.file("weights.safetensors")).has_value());

    write_file(tmp.file("config.json"), test::gpt2_config_json(kModel));
    const auto declared = checkpoint_model(tmp.file("weights.safetensors"));
    REQUIRE(declared.has_value());
    CHECK(declared->n_layer == 2);
    CHECK(declared->n_embd == 32);
    CHECK(declared->n_head == 4);
    CHECK(declared->vocab_size == 96);
    CHECK(declared->max_positions == 24);
    CHECK(declared->ln_eps == 1e-5f);
}

TEST_CASE("the host forward on loaded weights equals the forward on the same weights passed directly", "[checkpoint]") {
    TempDir tmp;
    const Units units = synthetic_units(kModel, 11);
    const std::vector<std::int32_t> tokens = {5, 17, 95, 0, 42, 42, 8, 63, 1, 2, 3, 4};
    for (const std::string dtype : {"F32", "F16", "BF16"}) {
        INFO(dtype);
        const Gpt2FixtureOptions o{.dtype = dtype};
        const auto dir = write_checkpoint_dir(tmp, dtype, checkpoint_file(kModel, units, o), test::gpt2_config_json(kModel));

        CellParams cell;
        cell.model = kModel;
        cell.weights = dir;
        const auto layout = WeightLayout::for_model(kModel);
        auto backend = make_backend(backend_config(cell));
        backend->place(layout, make_unit_filler(cell, layout), UnitSchedule::inference(layout.unit_count()));
        const auto loaded = host_logits(kModel, *backend, tokens, 2);

        const Units expected = expected_units(kModel, units, o);
        UnitsSource direct(expected);
        CHECK(loaded == host_logits(kModel, direct, tokens, 2));
    }
}

TEST_CASE("malformed safetensors files are refused with a message naming the problem", "[checkpoint]") {
    const std::string good = test::safetensors_file(base_tensors());
    REQUIRE(bytes_error(good) == "loaded");
    const auto header_of = [](std::vector<FixtureTensor> tensors) {
        test::assign_offsets(tensors);
        return tensors;
    };
    const auto with_header = [](const std::string& header, const std::string& data = "") {
        return test::length_prefix(header.size()) + header + data;
    };

    struct Case {
        std::string what, file, message;
    };
    std::vector<Case> cases = {
        {"empty file", "", "not a safetensors file: 0 bytes"},
        {"truncated inside the header length", good.substr(0, 5), "not a safetensors file: 5 bytes"},
        {"header length past the end", test::length_prefix(1 << 20) + good.substr(8), "runs past the end of the file"},
        {"header length over the limit", test::length_prefix(std::uint64_t{1} << 40) + good.substr(8),
         "not a safetensors file: its first 8 bytes give a header length of 1099511627776"},
        {"text", "{\"n_layer\": 2, \"n_embd\": 32}\n", "not a safetensors file: its first 8 bytes give"},
        {"file cut inside the data", good.substr(0, good.size() - 10), "run past the end of the data section"},
        {"malformed JSON", with_header("{\"wte.weight\": {\"dtype\": "), "the header is not valid JSON"},
        {"trailing garbage after the JSON", with_header("{} x"), "the header is not valid JSON"},
        // nlohmann's lexer would end the input at the NUL and never see what follows.
        {"a NUL byte after the JSON", with_header(std::string("{}\0 x", 5)), "the header is not valid JSON: a NUL byte at offset 2"},
        {"NUL padding", with_header(std::string("{}\0\0\0\0\0\0", 8)), "a NUL byte at offset 2"},
        {"invalid UTF-8", with_header("{\"w\xff\": 1}"), "the header is not valid JSON"},
        {"header not an object", with_header("[1, 2]"), "not a safetensors file: the header after the 8-byte length does not begin with '{'"},
        {"header after a space", with_header(" {}"), "does not begin with '{'"},
        {"duplicate tensor names",
         with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     std::string(8, '\0')),
         "duplicate key \"a\""},
        {"deep nesting", with_header("{\"__metadata__\":" + std::string(200, '[') + std::string(200, ']') + "}"),
         "nesting deeper than"},
        {"metadata not strings", with_header(R"({"__metadata__":{"format":1}})"), "\"__metadata__\" entry 'format' must be a string"},
        {"entry not an object", with_header(R"({"a":[1]})"), "tensor 'a' must be an object"},
        {"entry without shape", with_header(R"({"a":{"dtype":"F32","data_offsets":[0,0]}})"), "tensor 'a' has no \"shape\""},
        {"entry with an unknown field", with_header(R"({"a":{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":0}})", "abcd"),
         "unknown field 'x'"},
        {"negative offset", with_header(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "abcd"),
         "data_offsets must hold non-negative integers, got -4"},
        {"fractional dimension", with_header(R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "abcd"),
         "shape must hold non-negative integers"},
        {"offsets end before they begin", with_header(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", "abcd"),
         "end before they begin"},
        {"unknown dtype", with_header(R"({"a":{"dtype":"F7","shape":[1],"data_offsets":[0,4]}})", "abcd"),
         "tensor 'a' has unknown dtype \"F7\""},
        {"shape overflowing", with_header(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,4]}})", "abcd"),
         "more elements than can be counted"},
        {"byte range not dtype size x elements", with_header(R"({"a":{"dtype":"F16","shape":[3],"data_offsets":[0,4]}})", "abcd"),
         "4 bytes in data_offsets, but shape [3] of F16 needs 3 × 2 bytes"},
    };
    {
        auto t = header_of(base_tensors());
        t[0].offsets = {t[0].offsets->first, t.back().offsets->second + 64};
        cases.push_back({"offsets out of range", test::safetensors_file(t), "run past the end of the data section"});
    }
    {
        auto t = header_of(base_tensors());
        t[2].offsets = {t[1].offsets->first + 4, t[1].offsets->first + 4 + t[2].bytes.size()};
        cases.push_back({"overlapping tensors", test::safetensors_file(t), "overlap"});
    }
    for (const auto& c : cases) {
        INFO(c.what);
        const auto message = bytes_error(c.file);
        INFO(message);
        CHECK(message.starts_with("fixture.safetensors: "));
        CHECK(contains(message, c.message));
    }
}

// The safetensors reference reader's rule: the tensors' byte ranges tile the data section, from
// its first byte to its last. Anything else means the header does not describe the file.
TEST_CASE("bytes after the last tensor or between two tensors are refused", "[checkpoint]") {
    const std::string good = test::safetensors_file(base_tensors());
    CHECK(bytes_error(good + "xyz").starts_with("fixture.safetensors: 3 bytes after the last tensor's data"));
    CHECK(bytes_error(good + std::string(1, '\0')).starts_with("fixture.safetensors: 1 byte after the last tensor's data"));

    auto tensors = base_tensors();
    test::assign_offsets(tensors);
    constexpr std::uint64_t kHole = 4;
    for (std::size_t i = 1; i < tensors.size(); ++i)
        tensors[i].offsets = {tensors[i].offsets->first + kHole, tensors[i].offsets->second + kHole};
    std::string data = tensors[0].bytes + std::string(kHole, '\0');
    for (std::size_t i = 1; i < tensors.size(); ++i) data += tensors[i].bytes;
    const std::string header = test::safetensors_header(tensors);
    const auto message = bytes_error(test::length_prefix(header.size()) + header + data);
    INFO(message);
    const auto hole_at = std::to_string(tensors[0].bytes.size());
    CHECK(contains(message, "bytes " + hole_at + ".." + std::to_string(tensors[0].bytes.size() + kHole) +
                                " of the data section belong to no tensor"));
}

// Empty tensors (a dimension of 0) own no byte, but the reference reader still sorts them by
// (begin, end) with the others and wants each to begin where the tensors before it ended. So an
// empty tensor at the start or end of the data section or between two tensors is accepted —
// whether its name sorts before or after the tensor that begins where it does — and one that
// points inside a tensor is refused.
TEST_CASE("empty tensors may sit between tensors but not inside one", "[checkpoint]") {
    // Data section: "w" F32 [2] at bytes 0..8, then "x" F32 [1] at 8..12.
    const std::string data = test::encode({1.5f, -2.0f, 3.25f}, "F32");
    auto file_with = [&](const std::string& empties) {
        std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("x":{"dtype":"F32","shape":[1],"data_offsets":[8,12]})" + empties + "}";
        header.append((8 - header.size() % 8) % 8, ' ');
        return test::length_prefix(header.size()) + header + data;
    };
    auto parse = [](const std::string& file) { return parse_safetensors(std::as_bytes(std::span(file.data(), file.size())), "fixture.safetensors"); };

    // Names on both sides of "w" and "x" in the header's (sorted) key order, at 0, 8 and 12.
    const std::string empties = R"(,"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})"
                                R"(,"w.empty":{"dtype":"F16","shape":[3,0],"data_offsets":[0,0]})"
                                R"(,"v":{"dtype":"F32","shape":[0],"data_offsets":[8,8]})"
                                R"(,"x.empty":{"dtype":"BF16","shape":[0,5],"data_offsets":[8,8]})"
                                R"(,"z":{"dtype":"F32","shape":[0],"data_offsets":[12,12]})";
    std::vector<StoredTensor> tensors;
    REQUIRE_NOTHROW(tensors = parse(file_with(empties)));
    REQUIRE(tensors.size() == 7);
    std::map<std::string, std::size_t> sizes;
    for (const auto& t : tensors) sizes[t.name] = t.bytes.size();
    CHECK(sizes == std::map<std::string, std::size_t>{{"a", 0}, {"v", 0}, {"w", 8}, {"w.empty", 0}, {"x", 4}, {"x.empty", 0}, {"z", 0}});
    for (const auto& t : tensors)
        if (t.name == "x") CHECK(std::memcmp(t.bytes.data(), data.data() + 8, 4) == 0);

    // Inside "w" (bytes 0..8), named before and after it.
    for (const std::string name : {"b", "w.inside"}) {
        INFO(name);
        const auto message = bytes_error(file_with(",\"" + name + R"(":{"dtype":"F32","shape":[0],"data_offsets":[4,4]})"));
        CHECK(message == "fixture.safetensors: tensor '" + name +
                             "' is empty, but its data_offsets [4, 4] point inside tensor 'w' (bytes 0..8); an empty "
                             "tensor can only sit where one tensor ends and the next begins");
    }
}

// A length a few bytes short still ends inside the header's space padding, so the JSON parses;
// every tensor is then read a few bytes early, which gave NaN logits and exit code 0.
TEST_CASE("a header length a few bytes short is refused although the header still parses", "[checkpoint]") {
    auto tensors = base_tensors();
    std::string data;
    test::lay_out(tensors, data);
    const std::string header = test::safetensors_header(tensors) + std::string(8, ' ');
    REQUIRE(bytes_error(test::length_prefix(header.size()) + header + data) == "loaded");
    for (const std::size_t k : {1, 2, 8}) {
        INFO(k << " bytes short");
        const auto message = bytes_error(test::length_prefix(header.size() - k) + header + data);
        INFO(message);
        CHECK(message.starts_with("fixture.safetensors: " + std::to_string(k) + (k == 1 ? " byte" : " bytes") +
                                  " after the last tensor's data"));
        CHECK(contains(message, "the header length looks " + std::to_string(k)));
    }
}

TEST_CASE("checkpoints that are not this GPT-2 model are refused with a message naming the tensor", "[checkpoint]") {
    struct Case {
        std::string what, message;
        std::function<void(std::vector<FixtureTensor>&)> change;
    };
    const std::vector<Case> cases = {
        {"a missing tensor", "missing tensor 'transformer.h.1.mlp.c_fc.bias' (or 'h.1.mlp.c_fc.bias') of model 'ckpt_tiny'",
         [](auto& t) { std::erase_if(t, [](const FixtureTensor& x) { return x.name == "transformer.h.1.mlp.c_fc.bias"; }); }},
        {"a Conv1D weight in nn.Linear layout", "tensor 'transformer.h.0.attn.c_attn.weight' has shape [96, 32]",
         [](auto& t) { tensor_named(t, "transformer.h.0.attn.c_attn.weight").shape = {96, 32}; }},
        {"a bias of the wrong length", "tensor 'transformer.ln_f.bias' has shape [16, 2]",
         [](auto& t) { tensor_named(t, "transformer.ln_f.bias").shape = {16, 2}; }},
        {"an unsupported dtype", "tensor 'transformer.h.0.ln_1.weight' has dtype I32; weights can be loaded from F32, F16 and BF16 only",
         [](auto& t) { tensor_named(t, "transformer.h.0.ln_1.weight").dtype = "I32"; }},
        {"a layer beyond the model", "unexpected tensor 'transformer.h.2.ln_1.weight'",
         [](auto& t) {
             auto extra = tensor_named(t, "transformer.h.0.ln_1.weight");
             extra.name = "transformer.h.2.ln_1.weight";
             t.push_back(extra);
         }},
        {"a tensor with and without the prefix", "both 'transformer.wte.weight' and 'wte.weight' are present",
         [](auto& t) {
             auto bare = tensor_named(t, "transformer.wte.weight");
             bare.name = "wte.weight";
             t.push_back(bare);
         }},
    };
    for (const auto& c : cases) {
        INFO(c.what);
        auto tensors = base_tensors();
        c.change(tensors);
        const auto message = bytes_error(test::safetensors_file(tensors));
        INFO(message);
        CHECK(contains(message, c.message));
    }
}

TEST_CASE("config.json decides the shape, and a model or config of another GPT-2 is refused", "[checkpoint]") {
    TempDir tmp;
    const std::string tensors = test::safetensors_file(base_tensors());
    const auto config_error = [&](const std::string& name, const std::string& config, const ModelConfig& m = kModel) {
        return load_error(write_checkpoint_dir(tmp, name, tensors, config), m);
    };
    CHECK(config_error("good", test::gpt2_config_json(kModel)) == "loaded");

    ModelConfig wider = kModel;
    wider.name = "wider";
    wider.n_embd = 48;
    wider.n_head = 4;
    // The cell's model is not the checkpoint's: named in terms of both, with the [[models]] entry to use.
    const auto other_model = config_error("other_model", test::gpt2_config_json(kModel), wider);
    CHECK(contains(other_model, "config.json: the checkpoint is a GPT-2 model of n_layer = 2, n_embd = 32"));
    CHECK(contains(other_model, "but model 'wider' is a GPT-2 model of n_layer = 2, n_embd = 48"));
    CHECK(contains(other_model,
                   "family = \"gpt2\", layers = 2, hidden = 32, heads = 4, vocab = 96, positions = 24, ln_eps = 1e-05"));
    // config.json and the model agree, the tensors do not.
    CHECK(contains(config_error("other_tensors", test::gpt2_config_json(wider), wider),
                   "model.safetensors: tensor 'transformer.wte.weight' has shape [96, 32], but model 'wider'"));

    CHECK(contains(config_error("twice", test::gpt2_config_json(kModel, ",\n  \"model_type\": \"llama\"")), "duplicate key \"model_type\""));
    const auto replaced = [&](const std::string& from, const std::string& to) {
        std::string c = test::gpt2_config_json(kModel);
        c.replace(c.find(from), from.size(), to);
        return c;
    };
    // model_type picks the family, among those every FamilyDecl declares.
    CHECK(contains(config_error("mistral", replaced("\"gpt2\"", "\"mistral\"")),
                   "config.json: model_type \"mistral\" names no family that can be loaded; expected one of: gpt2, llama"));
    CHECK(contains(config_error("untyped", replaced("\"model_type\": \"gpt2\",", "")),
                   "config.json: config.json has no \"model_type\", which names the model's family; expected one of: gpt2, llama"));
    CHECK(contains(config_error("relu", replaced("gelu_new", "relu")), "activation_function \"relu\" is not supported"));
    CHECK(config_error("tanh", replaced("gelu_new", "gelu_pytorch_tanh")) == "loaded");
    CHECK(contains(config_error("inner", replaced("\"n_inner\": null", "\"n_inner\": 100")), "n_inner = 100 is not supported"));
    CHECK(config_error("inner4", replaced("\"n_inner\": null", "\"n_inner\": 128")) == "loaded");
    CHECK(contains(config_error("string", replaced("\"n_layer\": 2", "\"n_layer\": \"2\"")), "\"n_layer\" must be an integer, got \"2\""));
    CHECK(contains(config_error("zero", replaced("\"n_head\": 4", "\"n_head\": 0")), "\"n_head\" = 0 is out of range"));
    CHECK(contains(config_error("heads", replaced("\"n_head\": 4", "\"n_head\": 5")), "not divisible by n_head = 5"));
    CHECK(contains(config_error("eps", replaced("\"layer_norm_epsilon\": 9.99999975e-06", "\"layer_norm_epsilon\": -1")),
                   "\"layer_norm_epsilon\" must be a positive number"));
    CHECK(contains(config_error("bad_json", "{\"n_layer\": 2,}"), "config.json: config.json is not valid JSON"));
    CHECK(contains(config_error("nul", test::gpt2_config_json(kModel) + std::string("\0{", 2)), "a NUL byte at offset"));
    CHECK(contains(config_error("untied", replaced("\"n_inner\": null", "\"tie_word_embeddings\": false")),
                   "there is no lm_head.weight, and config.json unties it from wte"));
    CHECK(contains(config_error("scaled", replaced("\"n_inner\": null", "\"scale_attn_weights\": false")),
                   "scale_attn_weights = false is not supported"));

    fs::create_directories(tmp.file("empty_dir"));
    CHECK(contains(load_error(tmp.file("empty_dir")), "empty_dir: the directory has no model.safetensors"));
    fs::create_directories(tmp.file("no_config"));
    write_file(tmp.file("no_config") + "/model.safetensors", tensors);
    CHECK(contains(load_error(tmp.file("no_config")), "no_config: the directory has no config.json"));
    CHECK(contains(load_error(tmp.file("missing")), "missing: no such file or directory"));
}

TEST_CASE("bad checkpoints exit with status 2 from the binary, and nothing is written", "[checkpoint][cli]") {
    TempDir tmp;
    const std::string good = test::safetensors_file(base_tensors());
    const std::string config = test::gpt2_config_json(kModel);
    auto overlapping = base_tensors();
    test::assign_offsets(overlapping);
    overlapping[3].offsets = overlapping[2].offsets;
    overlapping[3].bytes = overlapping[2].bytes;
    overlapping[3].shape = overlapping[2].shape;

    const auto truncated = write_checkpoint_dir(tmp, "truncated", good.substr(0, good.size() / 2), config);
    const auto overlap = write_checkpoint_dir(tmp, "overlap", test::safetensors_file(overlapping), config);
    const auto good_dir = write_checkpoint_dir(tmp, "good", good, config);
    const auto out = tmp.file("out.npy");

    auto r = run_sweetspot("logits --weights '" + truncated + "' --tokens 1,2,3 -o '" + out + "'");
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "truncated/model.safetensors: tensor"));
    CHECK(contains(r.output, "run past the end of the data section"));
    r = run_sweetspot("logits --weights '" + overlap + "' --tokens 1,2,3 -o '" + out + "'");
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "overlap"));
    r = run_sweetspot("logits --weights '" + good_dir + "' --model tiny --tokens 1,2,3 -o '" + out + "'");
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "but model 'tiny' is a GPT-2 model of"));
    r = run_sweetspot("logits --weights '" + good_dir + "' --tokens 1,2,96 -o '" + out + "'");
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "token 96 is outside the vocabulary"));
    r = run_sweetspot("logits --tokens 1,2 -o '" + out + "'");
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "--model is needed with synthetic weights"));
    CHECK_FALSE(fs::exists(out));

    // A sweep naming a bad checkpoint is refused before anything runs.
    write_file(tmp.file("m.toml"), "[[models]]\nname = \"ckpt_tiny\"\nlayers = 2\nhidden = 32\nheads = 4\nvocab = 96\n"
                                   "positions = 24\n[defaults]\nmodel = \"ckpt_tiny\"\nseq = 8\n[[sweep]]\nweights = [\"" +
                                       good_dir + "\", \"" + overlap + "\"]\n");
    r = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + tmp.file("m.db") + "'");
    CHECK(r.exit_code == 2);
    CHECK(contains(r.output, "cell 1 (ckpt_tiny host baseline fp32 b1 s8, weights = \""));
    CHECK(contains(r.output, "overlap"));
    CHECK_FALSE(fs::exists(tmp.file("m.db")));
    r = run_sweetspot("list '" + tmp.file("m.toml") + "'");
    CHECK(r.exit_code == 2);
}

// Files that are not safetensors at all, or whose data the header does not describe, are refused
// before the output is opened: an existing output keeps its bytes and a missing one stays missing.
TEST_CASE("sweetspot logits refuses files that are not safetensors or not what their header says", "[checkpoint][cli]") {
    TempDir tmp;
    const std::string config = test::gpt2_config_json(kModel);
    auto tensors = base_tensors();
    std::string data;
    test::lay_out(tensors, data);
    const std::string header = test::safetensors_header(tensors) + std::string(8, ' ');
    const std::string sqlite = std::string("SQLite format 3\0", 16) + std::string(4080, '\x01');

    struct Case {
        std::string what, weights, model, message;
    };
    const std::vector<Case> cases = {
        {"trailing bytes", write_checkpoint_dir(tmp, "trailing", test::safetensors_file(base_tensors()) + "junk", config), "",
         "trailing/model.safetensors: 4 bytes after the last tensor's data"},
        {"header length one byte short",
         write_checkpoint_dir(tmp, "short", test::length_prefix(header.size() - 1) + header + data, config), "",
         "short/model.safetensors: 1 byte after the last tensor's data"},
        {"an SQLite database", tmp.file("junk.db"), "", tmp.file("junk.db") + ": not a safetensors file"},
        {"an SQLite database, with --model", tmp.file("junk.db"), "tiny", tmp.file("junk.db") + ": not a safetensors file"},
        {"text", tmp.file("notes.txt"), "", tmp.file("notes.txt") + ": not a safetensors file"},
    };
    write_file(tmp.file("junk.db"), sqlite);
    write_file(tmp.file("notes.txt"), "These are not the weights you are looking for.\n");
    const std::string out = tmp.file("out.npy");
    const std::string kept = "bytes that must survive";
    for (const auto& c : cases) {
        INFO(c.what);
        const std::string args = "logits --weights '" + c.weights + "'" + (c.model.empty() ? "" : " --model " + c.model) +
                                 " --tokens 1,2,3 --backend host -o '" + out + "'";
        write_file(out, kept);
        auto r = run_sweetspot(args);
        INFO(r.output);
        CHECK(r.exit_code == 2);
        CHECK(contains(r.output, c.message));
        std::ifstream f(out, std::ios::binary);
        const bool unchanged = std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()) == kept;
        CHECK(unchanged);
        fs::remove(out);
        r = run_sweetspot(args);
        CHECK(r.exit_code == 2);
        CHECK_FALSE(fs::exists(out));
    }
}

TEST_CASE("a sweep runs cells on checkpoint weights", "[checkpoint][cli]") {
    TempDir tmp;
    const auto dir = write_checkpoint_dir(tmp, "ckpt", test::safetensors_file(base_tensors({.dtype = "BF16"})),
                                          test::gpt2_config_json(kModel));
    write_file(tmp.file("m.toml"), "[[models]]\nname = \"ckpt_tiny\"\nlayers = 2\nhidden = 32\nheads = 4\nvocab = 96\n"
                                   "positions = 24\n[defaults]\nmodel = \"ckpt_tiny\"\nseq = 8\nwarmups = 0\niterations = 1\n"
                                   "weights = \"" + dir + "\"\n");
    const auto list = run_sweetspot("list '" + tmp.file("m.toml") + "'");
    INFO(list.output);
    CHECK(list.exit_code == 0);
    CHECK(contains(list.output, "yes"));
    const auto run = run_sweetspot("run '" + tmp.file("m.toml") + "' --db '" + tmp.file("m.db") + "'");
    INFO(run.output);
    CHECK(run.exit_code == 0);
    auto store = Store::open_read_only(tmp.file("m.db"));
    auto st = store.db().prepare("SELECT status, weights, check_rel_err FROM cells");
    REQUIRE(st.step());
    CHECK(st.text(0) == "ok");
    CHECK(st.text(1) == dir);
    CHECK(st.real(2) < 1e-4);
}

// The logits of a failed forward are no logits: a script that reads the file after a failure, or
// does not look at the exit code, must find the file it had, or none.
TEST_CASE("sweetspot logits writes no file when its logits are not finite", "[checkpoint][cli]") {
    TempDir tmp;
    auto tensors = base_tensors();
    tensor_named(tensors, "transformer.ln_f.bias").bytes =
        test::encode(std::vector<float>(kModel.n_embd, std::numeric_limits<float>::quiet_NaN()), "F32");
    const auto dir = write_checkpoint_dir(tmp, "nan", test::safetensors_file(tensors), test::gpt2_config_json(kModel));
    const auto out_dir = tmp.file("out");
    fs::create_directories(out_dir);
    const auto out = out_dir + "/logits.npy";
    const std::string args = "logits --weights '" + dir + "' --tokens 1,2,3 -o '" + out + "'";
    const auto none_before = run_sweetspot(args);
    INFO(none_before.output);
    CHECK(none_before.exit_code == 1);
    CHECK(contains(none_before.output, "non-finite values"));
    CHECK(contains(none_before.output, out + " not written"));
    CHECK(fs::is_empty(out_dir));

    write_file(out, "an earlier file");
    const auto one_before = run_sweetspot(args);
    CHECK(one_before.exit_code == 1);
    CHECK(test::read_bytes(out) == "an earlier file");
    CHECK(std::distance(fs::directory_iterator(out_dir), fs::directory_iterator()) == 1);
}

TEST_CASE("sweetspot logits writes a valid .npy of the host forward", "[checkpoint][cli]") {
    TempDir tmp;
    const Units units = synthetic_units(kModel, 5);
    const auto dir = write_checkpoint_dir(tmp, "ckpt", checkpoint_file(kModel, units, {.dtype = "F16"}),
                                          test::gpt2_config_json(kModel));
    const auto out = tmp.file("logits.npy");
    const auto r = run_sweetspot("logits --weights '" + dir + "' --tokens 1,2,3,4,5 --tokens '90 0 7 7 23' -o '" + out + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    CHECK(contains(r.output, "float32 [2, 5, 96] logits"));

    std::ifstream f(out, std::ios::binary);
    const std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    REQUIRE(file.size() > 10);
    CHECK(file.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
    const std::size_t header_len = static_cast<unsigned char>(file[8]) | static_cast<std::size_t>(static_cast<unsigned char>(file[9])) << 8;
    CHECK((10 + header_len) % 64 == 0);
    const std::string header = file.substr(10, header_len);
    CHECK(header.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 5, 96), }"));
    CHECK(header.ends_with("\n"));
    const std::size_t n = 2 * 5 * 96;
    REQUIRE(file.size() == 10 + header_len + n * sizeof(float));
    std::vector<float> logits(n);
    std::memcpy(logits.data(), file.data() + 10 + header_len, n * sizeof(float));

    const Units expected = expected_units(kModel, units, {.dtype = "F16"});
    UnitsSource direct(expected);
    CHECK(logits == host_logits(kModel, direct, {1, 2, 3, 4, 5, 90, 0, 7, 7, 23}, 2));
}

// The header and the data of a .npy file the CLI wrote.
std::pair<std::string, std::string> npy_parts(const std::string& path) {
    const std::string file = test::read_bytes(path);
    REQUIRE(file.size() > 10);
    const std::size_t header_len = static_cast<unsigned char>(file[8]) | static_cast<std::size_t>(static_cast<unsigned char>(file[9])) << 8;
    return {file.substr(10, header_len), file.substr(10 + header_len)};
}

TEST_CASE("sweetspot gradients writes the float64 reference's loss, a gradient per tensor and the weights after a step",
          "[checkpoint][cli]") {
    TempDir tmp;
    const Units units = synthetic_units(kModel, 5);
    const auto dir = write_checkpoint_dir(tmp, "ckpt", checkpoint_file(kModel, units, {.dtype = "F32"}),
                                          test::gpt2_config_json(kModel));
    const auto out = tmp.file("grads");
    const auto r = run_sweetspot("gradients --weights '" + dir + "' --tokens 1,2,3,4,5 --tokens 90,0,7,7,23 --targets 2,3,4,5,6 "
                                 "--targets 0,7,7,23,1 -o '" + out + "'");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);

    // The loss against one computed here from the host forward's fp32 logits of the same tokens.
    const auto logits_file = tmp.file("logits.npy");
    REQUIRE(run_sweetspot("logits --weights '" + dir + "' --tokens 1,2,3,4,5 --tokens 90,0,7,7,23 -o '" + logits_file + "'")
                .exit_code == 0);
    const auto [logits_header, logits_data] = npy_parts(logits_file);
    std::vector<float> logits(logits_data.size() / sizeof(float));
    std::memcpy(logits.data(), logits_data.data(), logits_data.size());
    const std::vector<int> targets = {2, 3, 4, 5, 6, 0, 7, 7, 23, 1};
    const auto vocab = static_cast<std::size_t>(kModel.vocab_size);
    REQUIRE(logits.size() == targets.size() * vocab);
    double expected = 0.0;
    for (std::size_t t = 0; t < targets.size(); ++t) {
        double sum = 0.0;
        for (std::size_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[t * vocab + v]));
        expected += std::log(sum) - logits[t * vocab + static_cast<std::size_t>(targets[t])];
    }
    expected /= static_cast<double>(targets.size());
    const auto [loss_header, loss_data] = npy_parts(out + "/loss.npy");
    CHECK(loss_header.starts_with("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }"));
    REQUIRE(loss_data.size() == sizeof(double));
    double loss = 0.0;
    std::memcpy(&loss, loss_data.data(), sizeof(double));
    CHECK(std::abs(loss - expected) < 1e-5 * expected);

    // One file per tensor in our layout, float64, and the loss.
    const auto layout = WeightLayout::for_model(kModel);
    std::size_t tensors = 0;
    for (const auto& unit : layout.units) tensors += unit.tensors.size();
    CHECK(static_cast<std::size_t>(std::distance(fs::directory_iterator(out), fs::directory_iterator())) == tensors + 2);
    CHECK(static_cast<std::size_t>(std::distance(fs::directory_iterator(out + "/updated"), fs::directory_iterator())) ==
          tensors);
    const auto [head_header, head_data] = npy_parts(out + "/lm_head.weight.npy");
    CHECK(head_header.starts_with("{'descr': '<f8', 'fortran_order': False, 'shape': (96, " + std::to_string(kModel.n_embd) + "), }"));
    CHECK(head_data.size() == 96 * static_cast<std::size_t>(kModel.n_embd) * sizeof(double));

    // The step: AdamW's first step moves a weight that does not decay by lr · g / (|g| + eps), g
    // being its gradient clipped to a global norm of 1 (every gradient file's squares summed here).
    const auto doubles = [&](const std::string& file) {
        const auto [header, data] = npy_parts(file);
        std::vector<double> v(data.size() / sizeof(double));
        std::memcpy(v.data(), data.data(), data.size());
        return v;
    };
    double squares = 0.0;
    for (const auto& unit : layout.units)
        for (const TensorSpec& t : unit.tensors)
            for (const double g : doubles(out + "/" + t.name + ".npy")) squares += g * g;
    const double clip = std::min(1.0, 1.0 / (std::sqrt(squares) + 1e-6));
    const auto& head = layout.units[static_cast<std::size_t>(layout.head_unit())];
    const TensorSpec& lnf_b = head.tensors[gpt2::head_tensor::lnf_b];
    const auto grad = doubles(out + "/" + lnf_b.name + ".npy");
    const auto updated = doubles(out + "/updated/" + lnf_b.name + ".npy");
    REQUIRE(updated.size() == grad.size());
    for (const std::size_t i : {std::size_t{0}, grad.size() - 1}) {
        const double g = grad[i] * clip;
        const double before = units[static_cast<std::size_t>(layout.head_unit())][static_cast<std::size_t>(lnf_b.offset) + i];
        const double lr = static_cast<double>(3e-4f), eps = static_cast<double>(1e-8f);
        CHECK(updated[i] == Catch::Approx(before - lr * g / (std::abs(g) + eps)).epsilon(1e-12));
    }

    // A folder that exists is not written into.
    const auto again = run_sweetspot("gradients --weights '" + dir + "' --tokens 1,2 --targets 2,3 -o '" + out + "'");
    CHECK(again.exit_code == 2);
    CHECK(contains(again.output, "exists; the gradients go into a new folder"));
}

// Files transformers itself wrote (tests/data/checkpoints/README.md), compared with its own logits
// by the same script that checks the GPU backends, here on the host backend.
TEST_CASE("checkpoints written by transformers give transformers' logits", "[checkpoint][cli]") {
    for (const std::string name :
         {"f32-tied", "f16-untied", "bf16-tied", "f32-sharded", "llama-f32-gqa", "llama-bf16-sharded"}) {
        INFO(name);
        TempDir tmp;
        const std::string dir = tmp.file(name);
        fs::copy(test::source_path("tests/data/checkpoints/" + name), dir);
        const auto r = test::run_command("python3 '" + test::source_path("tests/check_transformers.py") + "' --compare '" +
                                         dir + "' --backends host --sweetspot '" + test::sweetspot_binary() + "'");
        INFO(r.output);
        CHECK(r.exit_code == 0);
        CHECK(contains(r.output, "host"));
        CHECK(contains(r.output, " ok"));
    }
}

TEST_CASE("npy headers and token lists", "[checkpoint]") {
    const std::vector<std::int64_t> one = {3};
    const auto h = npy_header(one);
    CHECK(h.size() % 64 == 0);
    CHECK(contains(h, "'shape': (3,), }"));
    const std::vector<std::int64_t> two = {4, 5};
    CHECK(contains(npy_header(two), "'shape': (4, 5), }"));

    CHECK(parse_token_list("1,2, 3") == std::vector<std::int32_t>{1, 2, 3});
    CHECK(parse_token_list("7") == std::vector<std::int32_t>{7});
    CHECK_THROWS_AS(parse_token_list("1,x"), std::invalid_argument);
    CHECK_THROWS_AS(parse_token_list("1;2"), std::invalid_argument);
    CHECK_THROWS_AS(parse_token_list(""), std::invalid_argument);
    CHECK_THROWS_AS(parse_token_list("99999999999"), std::invalid_argument);
}

// Every mutated file either loads (and then every unit converts) or is refused with a
// CheckpointError: no crash, no other exception. Deterministic, so a failure reproduces.
TEST_CASE("fuzzed safetensors headers load or are refused cleanly", "[checkpoint][fuzz]") {
    const ModelConfig m{"fuzz", 2, 8, 2, 16, 8, 1e-5f};
    const auto layout = WeightLayout::for_model(m);
    const auto base_tensors = test::gpt2_tensors(layout, synthetic_units(m, 1), {.dtype = "F16", .attention_buffers = true});
    const std::string base = test::safetensors_file(base_tensors);
    std::mt19937_64 rng(20240611);
    const auto uniform = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
    const std::string json_bytes = "{}[]\",:0123456789-+.eE \\ntfu";

    const auto header_end = [](const std::string& f) {
        std::uint64_t n = 0;
        std::memcpy(&n, f.data(), 8);
        return static_cast<std::size_t>(8 + n);
    };
    // Rewrites the header length after the header changed size, as a writer would.
    const auto relength = [&](std::string f, std::size_t old_end) {
        const std::size_t new_header = old_end - 8 + (f.size() - base.size());
        return test::length_prefix(new_header) + f.substr(8);
    };
    const auto structured = [&]() {
        auto t = base_tensors;
        test::assign_offsets(t);
        auto& victim = t[uniform(t.size())];
        switch (uniform(5)) {
            case 0: victim.offsets->first = rng() % 2 ? victim.offsets->first + uniform(64) - 32 : rng(); break;
            case 1: victim.offsets->second = rng() % 2 ? victim.offsets->second + uniform(64) - 32 : rng(); break;
            case 2: std::swap(victim.offsets, t[uniform(t.size())].offsets); break;
            case 3: victim.dtype = std::vector<std::string>{"F32", "F16", "BF16", "I8", "F64", "X"}[uniform(6)]; break;
            case 4:
                if (victim.shape.empty()) victim.shape.push_back(static_cast<std::int64_t>(uniform(40)));
                else victim.shape[uniform(victim.shape.size())] = static_cast<std::int64_t>(uniform(40));
                break;
        }
        return test::safetensors_file(t);
    };

    int loaded = 0, refused = 0;
    constexpr int kCases = 12000;
    for (int i = 0; i < kCases; ++i) {
        std::string f = base;
        const std::size_t end = header_end(f);
        std::string mutation;
        switch (uniform(8)) {
            case 0: {  // flip bits in the header
                mutation = "bit flips";
                for (std::size_t k = 0, n = 1 + uniform(4); k < n; ++k) f[8 + uniform(end - 8)] ^= static_cast<char>(1 << uniform(8));
                break;
            }
            case 1: mutation = "truncation"; f.resize(uniform(f.size())); break;
            case 2: {  // insert JSON-ish bytes into the header, keeping the length consistent
                mutation = "insertion";
                const std::size_t at = 8 + uniform(end - 8);
                std::string ins;
                for (std::size_t k = 0, n = 1 + uniform(6); k < n; ++k) ins += json_bytes[uniform(json_bytes.size())];
                f.insert(at, ins);
                f = relength(f, end);
                break;
            }
            case 3: {  // delete a slice of the header
                mutation = "deletion";
                const std::size_t at = 8 + uniform(end - 8);
                f.erase(at, std::min(1 + uniform(40), end - at));
                f = relength(f, end);
                break;
            }
            case 4: {  // copy a slice of the header elsewhere in it
                mutation = "duplication";
                const std::size_t from = 8 + uniform(end - 8);
                const std::string slice = f.substr(from, std::min(1 + uniform(80), end - from));
                f.insert(8 + uniform(end - 8), slice);
                f = relength(f, end);
                break;
            }
            case 5: {  // a wrong header length
                mutation = "length field";
                const std::uint64_t n = rng() % 2 ? end - 8 + uniform(32) - 16 : rng();
                f = test::length_prefix(n) + f.substr(8);
                break;
            }
            case 6: mutation = "offsets, dtype or shape"; f = structured(); break;
            case 7: {  // the data may hold anything
                mutation = "data bytes";
                for (std::size_t k = 0; k < 8 && end < f.size(); ++k) f[end + uniform(f.size() - end)] = static_cast<char>(rng());
                break;
            }
        }
        try {
            const auto tensors = parse_safetensors(std::as_bytes(std::span(f.data(), f.size())), "fuzz.safetensors");
            Gpt2Weights weights(tensors, m, "fuzz.safetensors");
            for (std::size_t u = 0; u < layout.units.size(); ++u) {
                std::vector<float> buf(static_cast<std::size_t>(layout.units[u].numel));
                weights.fill_unit(static_cast<int>(u), buf);
            }
            ++loaded;
        } catch (const CheckpointError& e) {
            if (!std::string(e.what()).starts_with("fuzz.safetensors: ")) FAIL("case " << i << " (" << mutation << "): " << e.what());
            ++refused;
        } catch (const std::exception& e) {
            FAIL("case " << i << " (" << mutation << ") threw something other than CheckpointError: " << e.what());
        }
    }
    CHECK(loaded + refused == kCases);
    CHECK(loaded > 0);
    CHECK(refused > kCases / 2);
}

TEST_CASE("fuzzed config.json files load or are refused cleanly", "[checkpoint][fuzz]") {
    const std::string base = test::gpt2_config_json(kModel);
    std::mt19937_64 rng(7);
    int refused = 0;
    for (int i = 0; i < 2000; ++i) {
        std::string c = base;
        for (std::size_t k = 0, n = 1 + rng() % 3; k < n; ++k) {
            const std::size_t at = rng() % c.size();
            if (rng() % 2) c[at] ^= static_cast<char>(1 << (rng() % 8));
            else c.erase(at, 1 + rng() % 8);
        }
        try {
            checkpoint_config(c, "config.json", "fuzz");
        } catch (const CheckpointError&) {
            ++refused;
        } catch (const std::exception& e) {
            FAIL("config case " << i << " threw something other than CheckpointError: " << e.what());
        }
    }
    CHECK(refused > 0);
}
