// The `lengths` axis's draws (harness/matrix/sequence_lengths.hpp): each form's text, its refusals,
// and the distributions it draws, checked against their closed forms over many draws.
#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "harness/matrix/sequence_lengths.hpp"
#include "test_support.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;

namespace {

LengthSpec spec(const std::string& text) {
    const auto s = LengthSpec::parse(text);
    REQUIRE(s.has_value());
    return *s;
}

double median(std::vector<int> v) {
    std::sort(v.begin(), v.end());
    return v.size() % 2 == 1 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace

TEST_CASE("length specs read and write one text per form, and refuse the rest", "[lengths]") {
    for (const std::string text : {"fixed", "uniform:16-512", "lognormal:330,0.85", "zipf:1.2,2048", "file:a/b c.txt"}) {
        INFO(text);
        CHECK(spec(text).text() == text);
    }
    CHECK(spec("uniform:16-512") == LengthSpec{LengthSpec::Kind::uniform, 16, 512, ""});
    CHECK(spec("lognormal:330,0.85") == LengthSpec{LengthSpec::Kind::lognormal, 330, 0.85, ""});
    CHECK(spec("zipf:1.2,2048") == LengthSpec{LengthSpec::Kind::zipf, 1.2, 2048, ""});
    CHECK(spec("lognormal:330.0,1").text() == "lognormal:330,1");
    CHECK(spec("fixed").is_fixed());
    for (const std::string bad : {"", "fixed:", "uniform", "uniform:5-3", "uniform:0-4", "uniform:1.5-4", "uniform:4",
                                  "lognormal:-1,1", "lognormal:0,1", "lognormal:330,-0.1", "lognormal:330", "zipf:1,0",
                                  "zipf:1.2,3.5", "zipf:-1,10", "zipf:1,100000000", "file:", "poisson:3,4",
                                  "uniform:a-b", "lognormal:inf,1"}) {
        INFO("'" << bad << "'");
        CHECK_FALSE(LengthSpec::parse(bad).has_value());
    }
}

TEST_CASE("fixed lengths are seq each; every draw is within 1 .. seq and the seed's alone", "[lengths]") {
    CHECK(draw_lengths(spec("fixed"), 3, 77, 1) == std::vector<int>{77, 77, 77});
    for (const std::string text : {"uniform:1-5000", "lognormal:330,2", "zipf:0.5,4000"}) {
        INFO(text);
        const auto a = draw_lengths(spec(text), 500, 1024, 7);
        CHECK(a.size() == 500);
        CHECK(*std::min_element(a.begin(), a.end()) >= 1);
        CHECK(*std::max_element(a.begin(), a.end()) <= 1024);
        CHECK(draw_lengths(spec(text), 500, 1024, 7) == a);
        CHECK(draw_lengths(spec(text), 500, 1024, 8) != a);
        // A longer batch begins with the shorter one's lengths: a batch sweep keeps its sequences.
        const auto longer = draw_lengths(spec(text), 600, 1024, 7);
        CHECK(std::equal(a.begin(), a.end(), longer.begin()));
    }
    // Clipped at seq: a median far above it gives seq almost always.
    const auto clipped = draw_lengths(spec("lognormal:5000,0.1"), 100, 64, 3);
    CHECK(std::count(clipped.begin(), clipped.end(), 64) == 100);
}

TEST_CASE("uniform, lognormal and Zipf lengths follow their distributions", "[lengths]") {
    constexpr int n = 40000;
    SECTION("uniform:3-6: each of 3, 4, 5, 6 a quarter of the draws") {
        std::map<int, int> count;
        for (const int v : draw_lengths(spec("uniform:3-6"), n, 100, 11)) ++count[v];
        REQUIRE(count.size() == 4);
        for (int v = 3; v <= 6; ++v) CHECK(count[v] == Catch::Approx(n / 4).epsilon(0.05));
    }
    SECTION("lognormal:330,0.85: median 330, ln-lengths' deviation 0.85") {
        const auto lengths = draw_lengths(spec("lognormal:330,0.85"), n, 1 << 20, 12);
        CHECK(median(lengths) == Catch::Approx(330).epsilon(0.03));
        double mean = 0, square = 0;
        for (const int v : lengths) mean += std::log(v) / n;
        for (const int v : lengths) square += (std::log(v) - mean) * (std::log(v) - mean) / n;
        CHECK(mean == Catch::Approx(std::log(330.0)).epsilon(0.01));
        CHECK(std::sqrt(square) == Catch::Approx(0.85).epsilon(0.03));
    }
    SECTION("zipf:1,4: P(k) = (1/k) / (1 + 1/2 + 1/3 + 1/4)") {
        std::map<int, int> count;
        for (const int v : draw_lengths(spec("zipf:1,4"), n, 100, 13)) ++count[v];
        const double h = 1.0 + 1.0 / 2 + 1.0 / 3 + 1.0 / 4;
        for (int k = 1; k <= 4; ++k) CHECK(count[k] / double(n) == Catch::Approx(1.0 / k / h).margin(0.01));
        CHECK(count.size() == 4);
    }
}

TEST_CASE("a file of lengths is drawn from with replacement; bad files are refused naming the line", "[lengths]") {
    test::TempDir tmp;
    const std::string path = tmp.file("lengths.txt");
    test::write_file(path, "# measured lengths\n12\n\n  300  # a long one\n7\r\n");
    const auto lengths = draw_lengths(spec("file:" + path), 3000, 256, 5);
    std::map<int, int> count;
    for (const int v : lengths) ++count[v];
    CHECK(count.size() == 3);
    CHECK(count[12] > 800);
    CHECK(count[7] > 800);
    CHECK(count[256] > 800);  // 300, clipped to seq

    test::write_file(path, "12\n-4\n");
    CHECK_THROWS_WITH(draw_lengths(spec("file:" + path), 2, 64, 1),
                      ContainsSubstring(path + ":2: expected a positive integer length, got '-4'"));
    test::write_file(path, "12\n3.5\n");
    CHECK_THROWS_WITH(draw_lengths(spec("file:" + path), 2, 64, 1), ContainsSubstring(":2: expected a positive integer"));
    test::write_file(path, "# nothing\n\n");
    CHECK_THROWS_WITH(draw_lengths(spec("file:" + path), 2, 64, 1), ContainsSubstring("holds no length"));
    CHECK_THROWS_WITH(draw_lengths(spec("file:" + tmp.file("none.txt")), 2, 64, 1), ContainsSubstring("cannot be read"));
}
