// Mutated checkpoints of a tiny GPT-2, fed to the loader in-process and, for a bounded subset, to
// `sweetspot logits` as a user would run it. Whatever the bytes: the loader accepts the file or
// throws a CheckpointError naming it; the binary is not killed by a signal and exits 0, 1 or 2;
// exit 2 names the file; exits 1 and 2 leave the output as it was (an old file byte for byte, no
// new file); exit 0 writes finite logits only. Each case has its own seed, printed with any failure together
// with the mutation, so that one case can be replayed alone.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <random>
#include <set>

#include "kernels/model/checkpoint_error.hpp"
#include "kernels/model/checkpoint_weights.hpp"
#include "kernels/model/safetensors.hpp"
#include "kernels/model/synthetic_weights.hpp"
#include "safetensors_fixture.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using sweetspot::test::FixtureTensor;

namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kSeed = 20251123;
constexpr int kCases = 2400;
constexpr int kBinaryEvery = 10;  // every 10th case also runs the binary: 240 runs of some 40 ms
const ModelConfig kModel{"fuzz_tiny", 2, 16, 2, 32, 8, 1e-5f};
const std::string kTokens = "1,2,3,4";  // one sequence of 4 ids: logits [1, 4, vocab]
const std::string kLabel = "fuzz.safetensors";
const std::string kOldOutput = "an older output, which a refused run must leave as it is";

// What any correct reader must do with a mutant, where that is known regardless of the bytes.
enum class Expect { anything, refusal, load };

struct Mutant {
    std::string file;
    std::string how;  // the mutation, printed with any failure
    Expect expect = Expect::anything;
};

// mt19937_64 with plain modulo: its sequence is fixed by the standard, unlike the distributions'.
class Rng {
public:
    explicit Rng(std::uint64_t seed) : engine_(seed) {}
    std::uint64_t raw() { return engine_(); }
    std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(engine_() % n); }
    bool one_in(std::size_t n) { return below(n) == 0; }
    template <class T>
    const T& pick(const std::vector<T>& v) { return v[below(v.size())]; }

private:
    std::mt19937_64 engine_;
};

// One unmutated checkpoint: its tensors (offsets back to back), metadata and the file they make.
struct Base {
    std::string how;
    std::vector<FixtureTensor> tensors;
    std::string metadata;
    std::string data;
    std::string file;
};

std::string assemble(const std::string& header, const std::string& data) {
    return test::length_prefix(header.size()) + header + data;
}

std::vector<Base> make_bases() {
    const auto layout = WeightLayout::for_model(kModel);
    std::vector<std::vector<float>> units;
    for (std::size_t u = 0; u < layout.units.size(); ++u) {
        auto& buf = units.emplace_back(static_cast<std::size_t>(layout.units[u].numel));
        fill_synthetic_unit(kModel, layout, static_cast<int>(u), 3, buf);
    }
    std::vector<Base> bases;
    for (const std::string dtype : {"F32", "F16", "BF16"}) {
        for (const bool lm_head : {false, true}) {
            const bool prefix = dtype != "F16";
            Base b;
            b.how = dtype + (lm_head ? ", own lm_head" : ", tied lm_head") + (prefix ? ", transformer. names" : ", bare names");
            b.tensors = test::gpt2_tensors(layout, units, {dtype, prefix, lm_head, /*attention_buffers=*/lm_head});
            test::lay_out(b.tensors, b.data);
            b.metadata = dtype == "BF16" ? "" : R"({"format":"pt"})";
            b.file = assemble(test::safetensors_header(b.tensors, b.metadata), b.data);
            bases.push_back(std::move(b));
        }
    }
    return bases;
}

std::size_t header_end(const std::string& file) {
    std::uint64_t n = 0;
    std::memcpy(&n, file.data(), 8);
    return static_cast<std::size_t>(8 + n);
}

std::string hex(unsigned value) {
    constexpr char kDigits[] = "0123456789abcdef";
    return std::string("0x") + kDigits[(value >> 4) & 0xF] + kDigits[value & 0xF];
}

// --- byte-level mutations of the whole file -------------------------------------------------

// Any change to the header length alone shifts the data section off its tensors.
void refuse_if_length_changed(const std::string& before, Mutant& m) {
    if (m.file.compare(0, 8, before) != 0) m.expect = Expect::refusal;
}

void flip_bits(Rng& rng, Mutant& m) {
    const std::string before = m.file.substr(0, 8);
    m.how = "bit flips at";
    for (std::size_t k = 0, n = 1 + rng.below(4); k < n; ++k) {
        const std::size_t at = rng.below(m.file.size());
        const unsigned bit = static_cast<unsigned>(rng.below(8));
        m.file[at] = static_cast<char>(m.file[at] ^ (1 << bit));
        m.how += " " + std::to_string(at) + "." + std::to_string(bit);
    }
    refuse_if_length_changed(before, m);
}

void overwrite_bytes(Rng& rng, Mutant& m) {
    const std::string before = m.file.substr(0, 8);
    m.how = "byte overwrites";
    const std::size_t end = header_end(m.file);
    for (std::size_t k = 0, n = 1 + rng.below(8); k < n; ++k) {
        // Half of them land in the header, which is far smaller than the data.
        const std::size_t at = rng.one_in(2) ? rng.below(end) : rng.below(m.file.size());
        const auto value = static_cast<char>(rng.raw());
        m.file[at] = value;
        m.how += " [" + std::to_string(at) + "]=" + hex(static_cast<unsigned char>(value));
    }
    refuse_if_length_changed(before, m);
}

void truncate(Rng& rng, Mutant& m) {
    const std::size_t size = rng.below(m.file.size());
    m.how = "truncated to " + std::to_string(size) + " of " + std::to_string(m.file.size()) + " bytes";
    m.file.resize(size);
    m.expect = Expect::refusal;
}

void append_bytes(Rng& rng, Mutant& m) {
    const std::size_t n = 1 + rng.below(64);
    const int kind = static_cast<int>(rng.below(3));
    for (std::size_t k = 0; k < n; ++k) m.file += kind == 0 ? '\0' : kind == 1 ? ' ' : static_cast<char>(rng.raw());
    m.how = "appended " + std::to_string(n) + (kind == 0 ? " zero" : kind == 1 ? " space" : " random") + " bytes";
    m.expect = Expect::refusal;
}

void shift_header_length(Rng& rng, Mutant& m) {
    const std::uint64_t n = header_end(m.file) - 8;
    std::uint64_t wrong = n;
    while (wrong == n) {
        switch (rng.below(4)) {
            case 0: wrong = n - 1 - rng.below(16); break;
            case 1: wrong = n + 1 + rng.below(16); break;
            case 2: wrong = rng.below(2) ? 0 : std::numeric_limits<std::uint64_t>::max(); break;
            default: wrong = rng.raw() >> rng.below(64); break;
        }
    }
    m.how = "header length " + std::to_string(wrong) + " instead of " + std::to_string(n);
    m.file = test::length_prefix(wrong) + m.file.substr(8);
    m.expect = Expect::refusal;
}

// The padding after the JSON: whitespace is allowed, anything else is not JSON.
void repad_header(Rng& rng, Mutant& m) {
    const std::size_t end = header_end(m.file);
    const std::string fillers = std::string(" \t\n\r\0x}", 8);
    const char filler = fillers[rng.below(fillers.size())];
    const std::size_t n = 1 + rng.below(6);
    m.file.insert(end, std::string(n, filler));
    m.file = test::length_prefix(end - 8 + n) + m.file.substr(8);
    m.how = "header padded with " + std::to_string(n) + " more " + hex(static_cast<unsigned char>(filler));
    m.expect = std::string_view(" \t\n\r").find(filler) != std::string_view::npos ? Expect::load : Expect::refusal;
}

// Edits of the header's text, with the length rewritten to match, as a careless tool might make.
void splice_header(Rng& rng, Mutant& m) {
    const std::size_t end = header_end(m.file);
    std::string header = m.file.substr(8, end - 8);
    const std::size_t at = rng.below(header.size());
    static const std::string kJsonish = "{}[]\",:0123456789-+.eE \\ntfuFBI";
    switch (rng.below(3)) {
        case 0: {
            std::string ins;
            for (std::size_t k = 0, n = 1 + rng.below(6); k < n; ++k) ins += kJsonish[rng.below(kJsonish.size())];
            header.insert(at, ins);
            m.how = "inserted '" + ins + "' into the header at " + std::to_string(at);
            break;
        }
        case 1: {
            const std::size_t n = std::min(1 + rng.below(24), header.size() - at);
            m.how = "deleted '" + header.substr(at, n) + "' from the header at " + std::to_string(at);
            header.erase(at, n);
            break;
        }
        default: {
            const std::size_t from = rng.below(header.size());
            const std::string slice = header.substr(from, 1 + rng.below(60));
            header.insert(at, slice);
            m.how = "copied '" + slice + "' into the header at " + std::to_string(at);
            break;
        }
    }
    m.file = assemble(header, m.file.substr(end));
}

// --- mutations of the header's fields, re-serialized with a consistent length ----------------

void mutate_field(Rng& rng, const Base& b, Mutant& m) {
    auto tensors = b.tensors;
    std::string metadata = b.metadata;
    std::string data = b.data;
    auto& t = tensors[rng.below(tensors.size())];
    auto& other = tensors[rng.below(tensors.size())];
    std::string header;
    switch (rng.below(10)) {
        case 0:
            t.dtype = rng.pick(std::vector<std::string>{"F32", "F16", "BF16", "F64", "I8", "U16", "BOOL", "f32", "", "F8_E4M3"});
            m.how = t.name + " dtype " + t.dtype;
            break;
        case 1:
            if (t.shape.empty() || rng.one_in(3)) t.shape.insert(t.shape.begin() + static_cast<long>(rng.below(t.shape.size() + 1)), 1);
            else if (rng.one_in(2)) std::reverse(t.shape.begin(), t.shape.end());
            else t.shape[rng.below(t.shape.size())] = static_cast<std::int64_t>(rng.below(70));
            m.how = t.name + " shape [";
            for (std::size_t d = 0; d < t.shape.size(); ++d) m.how += (d ? ", " : "") + std::to_string(t.shape[d]);
            m.how += "]";
            break;
        case 2: {
            const auto delta = static_cast<std::uint64_t>(1 + rng.below(16));
            auto& [begin, end] = *t.offsets;
            if (rng.one_in(2)) begin = rng.one_in(2) ? begin + delta : begin - std::min(begin, delta);
            else end = rng.one_in(2) ? end + delta : end - std::min(end, delta);
            m.how = t.name + " data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
            break;
        }
        case 3:
            std::swap(t.offsets, other.offsets);
            m.how = "data_offsets of " + t.name + " and " + other.name + " swapped";
            break;
        case 4:
            m.how = t.name + " renamed ";
            t.name = rng.one_in(2) && t.name.starts_with("transformer.") ? t.name.substr(12) : t.name + "_";
            m.how += t.name;
            break;
        case 5: {
            m.how = "entry of " + t.name + " removed, its bytes kept";
            const std::string name = t.name;
            std::erase_if(tensors, [&](const FixtureTensor& x) { return x.name == name; });
            m.expect = Expect::refusal;  // its bytes now belong to no tensor
            break;
        }
        case 6: {
            m.how = t.name + " removed with its bytes";
            const std::string name = t.name;
            std::erase_if(tensors, [&](const FixtureTensor& x) { return x.name == name; });
            test::lay_out(tensors, data);
            break;
        }
        case 7:
            metadata = rng.pick(std::vector<std::string>{R"({"format":1})", R"([])", R"({"a":{"b":"c"}})", R"({"format":"np","x":"y"})"});
            m.how = "__metadata__ " + metadata;
            m.expect = metadata.find("np") != std::string::npos ? Expect::load : Expect::refusal;
            break;
        case 8: {
            // Entries listed, and bytes stored, in other orders: a valid file of the same tensors.
            for (std::size_t i = tensors.size(); i > 1; --i) std::swap(tensors[i - 1], tensors[rng.below(i)]);
            auto stored = tensors;
            for (std::size_t i = stored.size(); i > 1; --i) std::swap(stored[i - 1], stored[rng.below(i)]);
            test::lay_out(stored, data);
            for (auto& x : tensors)
                x.offsets = std::find_if(stored.begin(), stored.end(), [&](const FixtureTensor& s) { return s.name == x.name; })->offsets;
            m.how = "entries and data reordered";
            m.expect = Expect::load;
            break;
        }
        default: {
            header = test::safetensors_header(tensors, metadata);
            const std::size_t entry = header.find("\"data_offsets\"");
            if (rng.one_in(2)) {
                header.insert(entry, "\"extra\":0,");
                m.how = "a tensor entry with an unknown field";
            } else {
                const std::size_t open = header.rfind('"', header.rfind("\":{", entry) - 1);
                const std::size_t close = header.find('}', entry) + 1;
                header.insert(close, "," + header.substr(open, close - open));
                m.how = "a tensor entry repeated";
            }
            m.expect = Expect::refusal;
            break;
        }
    }
    if (header.empty()) header = test::safetensors_header(tensors, metadata);
    m.file = assemble(header, data);
}

// Weights the file stores faithfully, but that no forward can turn into finite logits (or can only
// just): NaN, infinities, the largest finite values, subnormals.
void poison_values(Rng& rng, const Base& b, Mutant& m) {
    auto tensors = b.tensors;
    FixtureTensor* t = nullptr;
    while (t == nullptr || t->dtype == "U8" || t->name.ends_with("masked_bias")) t = &tensors[rng.below(tensors.size())];
    const std::size_t size = t->dtype == "F32" ? 4 : 2;
    struct Poison {
        float value;
        const char* name;
    };
    const std::vector<Poison> poisons = {{std::numeric_limits<float>::quiet_NaN(), "NaN"},
                                         {std::numeric_limits<float>::infinity(), "+Inf"},
                                         {-std::numeric_limits<float>::infinity(), "-Inf"},
                                         {3.0e38f, "3e38"},
                                         {-65504.0f, "-65504"},
                                         {1e-40f, "1e-40"}};
    const Poison& v = rng.pick(poisons);
    const std::size_t n = 1 + rng.below(4);
    for (std::size_t k = 0; k < n; ++k) {
        const std::size_t element = rng.below(t->bytes.size() / size);
        t->bytes.replace(element * size, size, test::encode({v.value}, t->dtype));
    }
    std::string data;
    for (const auto& x : tensors) data += x.bytes;
    m.file = assemble(test::safetensors_header(tensors, b.metadata), data);
    m.how = std::to_string(n) + " elements of " + t->name + " set to " + v.name;
    m.expect = Expect::load;
}

Mutant mutate(std::uint64_t seed, const std::vector<Base>& bases) {
    Rng rng(seed);
    const Base& b = bases[rng.below(bases.size())];
    Mutant m{b.file, "", Expect::anything};
    switch (rng.below(11)) {
        case 0: flip_bits(rng, m); break;
        case 1: overwrite_bytes(rng, m); break;
        case 2: truncate(rng, m); break;
        case 3: append_bytes(rng, m); break;
        case 4: shift_header_length(rng, m); break;
        case 5: repad_header(rng, m); break;
        case 6: splice_header(rng, m); break;
        case 7:
        case 8: mutate_field(rng, b, m); break;
        case 9: poison_values(rng, b, m); break;
        default: m.how = "unchanged"; m.expect = Expect::load; break;
    }
    m.how = b.how + ": " + m.how;
    return m;
}

// --- running the loader and the binary ----------------------------------------------------

// The loader's verdict: empty when the file loaded (and every unit converted), else the message.
std::string load_in_process(const std::string& file) {
    const auto layout = WeightLayout::for_model(kModel);
    try {
        const auto tensors = parse_safetensors(std::as_bytes(std::span(file.data(), file.size())), kLabel);
        const Gpt2Weights weights(tensors, kModel, kLabel);
        for (std::size_t u = 0; u < layout.units.size(); ++u) {
            std::vector<float> buf(static_cast<std::size_t>(layout.units[u].numel));
            weights.fill_unit(static_cast<int>(u), buf);
        }
    } catch (const CheckpointError& e) {
        const std::string message = e.what();
        return message.empty() ? "(an empty message)" : message;
    }
    return {};
}

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::set<std::string> names_in(const std::string& dir) {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
    return names;
}

// The logits of a .npy file `sweetspot logits` wrote; empty, with `why` set, when it is not the
// float32 [1, 4, vocab] array the command promises.
std::vector<float> read_logits(const std::string& path, std::string& why) {
    const std::string file = read_file(path);
    if (file.size() < 10 || file.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) != 0) {
        why = "not a version 1.0 .npy file";
        return {};
    }
    const std::size_t header = static_cast<unsigned char>(file[8]) | static_cast<std::size_t>(static_cast<unsigned char>(file[9])) << 8;
    const std::string dict = file.substr(10, header);
    const std::string shape = "(1, 4, " + std::to_string(kModel.vocab_size) + ")";
    const std::size_t n = 4 * static_cast<std::size_t>(kModel.vocab_size);
    if (dict.find("'<f4'") == std::string::npos || dict.find(shape) == std::string::npos || file.size() != 10 + header + 4 * n) {
        why = "not a float32 " + shape + " array: " + dict;
        return {};
    }
    std::vector<float> logits(n);
    std::memcpy(logits.data(), file.data() + 10 + header, 4 * n);
    return logits;
}

struct Tally {
    int loaded = 0, refused = 0;
    int exits[3] = {0, 0, 0};
};

// Runs the binary on `m` (written into `dir` beside a config.json), the output either absent or
// an older file; checks what a user may rely on.
void run_binary(const Mutant& m, const std::string& dir, const std::string& out_dir, bool old_output,
                const std::string& loader_verdict, Tally& tally) {
    test::write_file(dir + "/model.safetensors", m.file);
    fs::remove_all(out_dir);
    fs::create_directories(out_dir);
    const std::string out = out_dir + "/logits.npy";
    if (old_output) test::write_file(out, kOldOutput);
    const auto r = test::run_sweetspot("logits --weights '" + dir + "' --tokens " + kTokens + " --backend host -o '" + out + "'");
    INFO("output file " << (old_output ? "there before" : "absent before") << "; the binary said:\n" << r.output);
    REQUIRE((r.exit_code == 0 || r.exit_code == 1 || r.exit_code == 2));  // a signal reads as 128 + its number
    ++tally.exits[r.exit_code];
    // The binary opens the checkpoint as the loader does, so both must agree on whether it loads.
    CHECK((r.exit_code == 2) == !loader_verdict.empty());
    if (r.exit_code == 2) CHECK(r.output.find(dir + "/model.safetensors: ") != std::string::npos);
    if (r.exit_code != 0) {
        const std::set<std::string> expected = old_output ? std::set<std::string>{"logits.npy"} : std::set<std::string>{};
        CHECK(names_in(out_dir) == expected);
        if (old_output) {
            const bool untouched = read_file(out) == kOldOutput;
            CHECK(untouched);
        }
    }
    if (r.exit_code == 0) {
        std::string why;
        const auto logits = read_logits(out, why);
        INFO(why);
        REQUIRE_FALSE(logits.empty());
        const auto bad = std::count_if(logits.begin(), logits.end(), [](float x) { return !std::isfinite(x); });
        INFO(bad << " of " << logits.size() << " logits are not finite, yet the exit code is 0");
        CHECK(bad == 0);
    }
}

}  // namespace

TEST_CASE("mutated checkpoints are loaded or refused cleanly, in-process and by sweetspot logits", "[checkpoint][fuzz]") {
    const auto started = std::chrono::steady_clock::now();
    const auto bases = make_bases();
    test::TempDir tmp;
    const std::string dir = tmp.file("checkpoint");
    const std::string out_dir = tmp.file("out");
    fs::create_directories(dir);
    test::write_file(dir + "/config.json", test::gpt2_config_json(kModel));
    Tally tally;
    int binary_runs = 0;
    std::chrono::duration<double> in_binary{};
    for (int i = 0; i < kCases; ++i) {
        const std::uint64_t seed = kSeed + static_cast<std::uint64_t>(i);
        const Mutant m = mutate(seed, bases);
        INFO("case " << i << " (seed " << seed << "): " << m.how);
        std::string verdict;
        try {
            verdict = load_in_process(m.file);
        } catch (const std::exception& e) {
            FAIL("the loader threw something other than a CheckpointError: " << e.what());
        }
        INFO("the loader said: " << (verdict.empty() ? "loaded" : verdict));
        if (verdict.empty()) {
            ++tally.loaded;
        } else {
            ++tally.refused;
            CHECK(verdict.starts_with(kLabel + ": "));
        }
        if (m.expect == Expect::refusal) CHECK_FALSE(verdict.empty());
        if (m.expect == Expect::load) CHECK(verdict.empty());
        if (i % kBinaryEvery == 0) {
            const auto before = std::chrono::steady_clock::now();
            run_binary(m, dir, out_dir, (i / kBinaryEvery) % 2 == 1, verdict, tally);
            in_binary += std::chrono::steady_clock::now() - before;
            ++binary_runs;
        }
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
    std::cout << "checkpoint fuzz: " << kCases << " mutants (" << tally.loaded << " loaded, " << tally.refused
              << " refused), " << binary_runs << " through sweetspot logits (exit 0: " << tally.exits[0]
              << ", 1: " << tally.exits[1] << ", 2: " << tally.exits[2] << "), in " << took.count() << " s ("
              << in_binary.count() << " s of them in the binary)\n";
    // Both outcomes are exercised, in-process and through the binary.
    CHECK(tally.loaded > kCases / 10);
    CHECK(tally.refused > kCases / 2);
    CHECK(tally.exits[0] > 0);
    CHECK(tally.exits[2] > 0);
}
