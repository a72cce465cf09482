#include "harness/matrix/sequence_lengths.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>
#include <random>
#include <stdexcept>
#include <tuple>

#include "base/number_text.hpp"

namespace sweetspot {

namespace {

constexpr std::uint64_t kStream = 0x6c656e6774687321ull;  // "lengths!": apart from the token stream's

// A uniform double in (0, 1): 53 random bits, never 0 (the log below needs that).
double uniform_open(std::mt19937_64& rng) { return (static_cast<double>(rng() >> 11) + 0.5) * 0x1.0p-53; }

bool is_integer(double v) { return v == std::floor(v); }

// "A<sep>B" as two numbers.
std::optional<std::pair<double, double>> pair_of(std::string_view text, char sep) {
    const auto at = text.find(sep);
    if (at == std::string_view::npos) return std::nullopt;
    const auto a = parse_finite_number(text.substr(0, at)), b = parse_finite_number(text.substr(at + 1));
    if (!a || !b) return std::nullopt;
    return std::pair{*a, *b};
}

std::vector<int> lengths_in_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("lengths file " + path + " cannot be read");
    std::vector<int> lengths;
    std::string line;
    for (int number = 1; std::getline(in, line); ++number) {
        if (const auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
        const auto first = line.find_first_not_of(" \t\r");
        if (first == std::string::npos) continue;
        const auto last = line.find_last_not_of(" \t\r");
        const auto v = parse_finite_number(std::string_view(line).substr(first, last - first + 1));
        if (!v || !is_integer(*v) || *v < 1 || *v > 1e9)
            throw std::runtime_error(path + ":" + std::to_string(number) + ": expected a positive integer length, got '" +
                                     line.substr(first, last - first + 1) + "'");
        lengths.push_back(static_cast<int>(*v));
    }
    if (lengths.empty()) throw std::runtime_error("lengths file " + path + " holds no length");
    return lengths;
}

}  // namespace

std::string LengthSpec::text() const {
    switch (kind) {
        case Kind::fixed: return "fixed";
        case Kind::uniform: return "uniform:" + format_number(a) + "-" + format_number(b);
        case Kind::lognormal: return "lognormal:" + format_number(a) + "," + format_number(b);
        case Kind::zipf: return "zipf:" + format_number(a) + "," + format_number(b);
        case Kind::file: return "file:" + path;
    }
    return {};
}

std::optional<LengthSpec> LengthSpec::parse(std::string_view text) {
    if (text == "fixed") return LengthSpec{};
    const auto colon = text.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    const std::string_view form = text.substr(0, colon), args = text.substr(colon + 1);
    LengthSpec s;
    if (form == "file") {
        if (args.empty()) return std::nullopt;
        s.kind = Kind::file;
        s.path = std::string(args);
        return s;
    }
    const auto ab = pair_of(args, form == "uniform" ? '-' : ',');
    if (!ab) return std::nullopt;
    std::tie(s.a, s.b) = *ab;
    if (form == "uniform") {
        s.kind = Kind::uniform;
        if (!is_integer(s.a) || !is_integer(s.b) || s.a < 1 || s.a > s.b) return std::nullopt;
    } else if (form == "lognormal") {
        s.kind = Kind::lognormal;
        if (s.a <= 0 || s.b < 0) return std::nullopt;
    } else if (form == "zipf") {
        s.kind = Kind::zipf;
        if (s.a < 0 || !is_integer(s.b) || s.b < 1 || s.b > 1e7) return std::nullopt;
    } else {
        return std::nullopt;
    }
    return s;
}

std::vector<int> draw_lengths(const LengthSpec& spec, int batch, int seq, std::uint64_t seed) {
    std::vector<int> lengths(static_cast<std::size_t>(std::max(batch, 0)), seq);
    if (spec.is_fixed()) return lengths;
    std::mt19937_64 rng(seed ^ kStream);
    const auto clip = [seq](double v) { return static_cast<int>(std::clamp(std::nearbyint(v), 1.0, double(seq))); };
    switch (spec.kind) {
        case LengthSpec::Kind::fixed: break;
        case LengthSpec::Kind::uniform: {
            const auto span = static_cast<std::uint64_t>(spec.b - spec.a) + 1;
            // rng() % span has a bias of at most span / 2^64: nothing at these sizes.
            for (int& n : lengths) n = clip(spec.a + static_cast<double>(rng() % span));
            break;
        }
        case LengthSpec::Kind::lognormal:
            // Box–Muller, one deviate per pair of uniforms.
            for (int& n : lengths) {
                const double u1 = uniform_open(rng), u2 = uniform_open(rng);
                const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
                n = clip(spec.a * std::exp(spec.b * z));
            }
            break;
        case LengthSpec::Kind::zipf: {
            // Inverse transform over the cumulative weights of 1 .. MAX.
            const auto max = static_cast<std::size_t>(spec.b);
            std::vector<double> cumulative(max);
            double total = 0;
            for (std::size_t k = 1; k <= max; ++k) cumulative[k - 1] = total += std::pow(static_cast<double>(k), -spec.a);
            for (int& n : lengths) {
                const double u = uniform_open(rng) * total;
                const auto at = std::lower_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin();
                n = clip(static_cast<double>(std::min<std::size_t>(static_cast<std::size_t>(at), max - 1) + 1));
            }
            break;
        }
        case LengthSpec::Kind::file: {
            const std::vector<int> pool = lengths_in_file(spec.path);
            for (int& n : lengths) n = clip(pool[static_cast<std::size_t>(rng() % pool.size())]);
            break;
        }
    }
    return lengths;
}

std::string lengths_text(std::span<const int> lengths) {
    std::string text;
    for (const int n : lengths) text += (text.empty() ? "" : ",") + std::to_string(n);
    return text;
}

}  // namespace sweetspot
