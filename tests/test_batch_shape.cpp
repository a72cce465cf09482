// BatchShape (kernels/model/batch_shape.hpp): rows, offsets, positions and padding of rectangular,
// padded and packed batches, against layouts written out by hand.
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include "kernels/model/batch_shape.hpp"

using namespace sweetspot;
using Catch::Matchers::ContainsSubstring;
using Ints = std::vector<std::int32_t>;

TEST_CASE("a rectangular batch is batch × seq rows, padded and packed alike", "[batch_shape]") {
    const BatchShape r = BatchShape::rectangular(2, 3);
    CHECK(r.batch() == 2);
    CHECK(r.is_rectangular());
    CHECK(r.rows() == 6);
    CHECK(r.real_tokens() == 6);
    CHECK(r.padded_tokens() == 0);
    CHECK(r.stride() == 3);
    CHECK(r.offsets() == Ints{0, 3});
    CHECK(r.positions() == Ints{0, 1, 2, 0, 1, 2});
    const BatchShape p = BatchShape::ragged({3, 3}, Packing::packed);
    CHECK(p.is_rectangular());
    CHECK(p.rows() == 6);
    CHECK(p.offsets() == r.offsets());
    CHECK(p.positions() == r.positions());
}

TEST_CASE("a ragged batch padded to its longest sequence, or packed back to back", "[batch_shape]") {
    const BatchShape padded = BatchShape::ragged({2, 4, 1}, Packing::padded);
    CHECK_FALSE(padded.is_rectangular());
    CHECK(padded.longest() == 4);
    CHECK(padded.stride() == 4);
    CHECK(padded.rows() == 12);
    CHECK(padded.real_tokens() == 7);
    CHECK(padded.padded_tokens() == 5);
    CHECK(padded.padding_share() == 5.0 / 12.0);
    CHECK(padded.offsets() == Ints{0, 4, 8});
    CHECK(padded.first_row(2) == 8);
    CHECK(padded.positions() == Ints{0, 1, 0, 0, 0, 1, 2, 3, 0, 0, 0, 0});
    const std::vector<bool> real = {true, true, false, false, true, true, true, true, true, false, false, false};
    for (std::int64_t row = 0; row < 12; ++row) {
        INFO("row " << row);
        CHECK(padded.is_real(row) == real[static_cast<std::size_t>(row)]);
    }
    CHECK_FALSE(padded.is_real(12));

    const BatchShape packed = BatchShape::ragged({2, 4, 1}, Packing::packed);
    CHECK(packed.rows() == 7);
    CHECK(packed.padded_tokens() == 0);
    CHECK(packed.padding_share() == 0.0);
    CHECK(packed.stride() == 4);
    CHECK(packed.offsets() == Ints{0, 2, 6});
    CHECK(packed.first_row(1) == 2);
    CHECK(packed.positions() == Ints{0, 1, 0, 1, 2, 3, 0});
    CHECK(packed.is_real(6));
    CHECK_FALSE(packed.is_real(7));

    // A stride above the longest, as a framework padding to a fixed length does.
    const BatchShape wide = BatchShape::ragged({2, 3}, Packing::padded, 5);
    CHECK(wide.rows() == 10);
    CHECK(wide.offsets() == Ints{0, 5});
}

TEST_CASE("a batch shape refuses lengths it cannot hold", "[batch_shape]") {
    CHECK_THROWS_WITH(BatchShape::ragged({}, Packing::packed), ContainsSubstring("at least one sequence"));
    CHECK_THROWS_WITH(BatchShape::ragged({3, 0}, Packing::padded),
                      ContainsSubstring("sequence 1 has length 0; every length must be at least 1"));
    CHECK_THROWS_WITH(BatchShape::ragged({3, 5}, Packing::padded, 4),
                      ContainsSubstring("a stride of 4 rows is shorter than the longest sequence (5)"));
    CHECK_THROWS_WITH(BatchShape::rectangular(0, 4), ContainsSubstring("at least 1, got 0 × 4"));
}
