// The order of GpuTrainStep's host update (kernels/compute/host_update_order.hpp): after the
// backward, and started by it, with the backward ending at each point of the way down.
#include <algorithm>
#include <numeric>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "base/item_progress.hpp"
#include "kernels/compute/host_update_order.hpp"

using namespace sweetspot;

namespace {

// The units in the order taken: `down` of them while the backward runs, the rest after its end.
std::vector<int> taken(int units, int down) {
    ItemProgress released;
    released.begin(units);
    bool ended = false;
    HostUpdateOrder order(units, released, [&] { return ended; });
    std::vector<int> out;
    for (int u = order.next(); u >= 0; u = order.next()) {
        out.push_back(u);
        if (static_cast<int>(out.size()) == down) {
            for (int r = 0; r < units; ++r) released.done(r);
            ended = true;
        }
    }
    released.end();
    return out;
}

}  // namespace

TEST_CASE("the host update after the backward takes the units from 0 up", "[host_update_order]") {
    HostUpdateOrder order(5);
    std::vector<int> out;
    for (int u = order.next(); u >= 0; u = order.next()) out.push_back(u);
    CHECK(out == std::vector<int>{0, 1, 2, 3, 4});
    CHECK(order.ready(3));
    CHECK_FALSE(order.early());
}

TEST_CASE("the host update started by the backward goes down while it runs, then up from 0, the block below the top "
          "last", "[host_update_order]") {
    // Six blocks: units 1 .. 6, the head 7. Three taken on the way down: the head, the top block,
    // then 4, passing over 5, which comes last.
    CHECK(taken(8, 3) == std::vector<int>{7, 6, 4, 0, 1, 2, 3, 5});
    // Five: 5 is still passed over.
    CHECK(taken(8, 5) == std::vector<int>{7, 6, 4, 3, 2, 0, 1, 5});
    // The backward ended before the way down reached 5: nothing held back.
    CHECK(taken(8, 2) == std::vector<int>{7, 6, 0, 1, 2, 3, 4, 5});
    CHECK(taken(8, 1) == std::vector<int>{7, 0, 1, 2, 3, 4, 5, 6});
    // Down to the embedding: 5 after it.
    CHECK(taken(8, 7) == std::vector<int>{7, 6, 4, 3, 2, 1, 0, 5});
    // One block (the held-back unit would be the embedding, the way down's last): no unit passed over.
    CHECK(taken(3, 3) == std::vector<int>{2, 1, 0});
}

TEST_CASE("the host update started by the backward takes every unit once, wherever the backward ends",
          "[host_update_order]") {
    for (int units = 1; units <= 9; ++units) {
        for (int down = 0; down <= units; ++down) {
            INFO("units " << units << ", " << down << " on the way down");
            std::vector<int> out = taken(units, down);
            std::sort(out.begin(), out.end());
            std::vector<int> all(static_cast<std::size_t>(units));
            std::iota(all.begin(), all.end(), 0);
            CHECK(out == all);
        }
    }
}

TEST_CASE("the host update started by the backward waits for what the backward has let go of", "[host_update_order]") {
    ItemProgress released;
    released.begin(4);
    HostUpdateOrder order(4, released, [] { return false; });
    CHECK(order.early());
    CHECK_FALSE(order.ready(3));
    released.done(3);
    CHECK(order.ready(3));
    order.wait(3);  // returns: done
    CHECK_FALSE(order.ready(2));
    released.end();
}
