#pragma once
// The order GpuTrainStep's host update takes a model's units in (the embedding 0, the blocks, the
// head last). After the backward: 0 .. n − 1, the order the next forward reads them in. Started
// during the backward (nothing to wait for but each unit's own gradient): from the top down, as
// the backward makes the gradients, each unit once the backward has let go of it, for as long as
// the GPU is still making gradients; then the rest from 0 up, the units the next forward needs
// first still updated first; and last the block below the top one, passed over on the way down.
// The forward crosses the units updated during the backward without waiting, which would leave
// the cores idle from the update's last unit until the next backward's first gradient: the
// held-back block's update (one unit's AdamW takes as long as the forward takes over several)
// fills that time, and only the top block and the head are left to the forward after it. The top
// block stays first on the way down: its gradient is the backward's first.
#include <functional>
#include <utility>

#include "base/item_progress.hpp"

namespace sweetspot {

class HostUpdateOrder {
public:
    explicit HostUpdateOrder(int units) : top_(units) {}
    // `backward_ended`: whether the GPU has made the backward's last gradient (unit 0's).
    HostUpdateOrder(int units, const ItemProgress& released, std::function<bool()> backward_ended)
        : top_(units), held_(units - 3), from_top_(true), released_(&released),
          backward_ended_(std::move(backward_ended)) {}

    // The next unit, taken; −1 after the last.
    int next() {
        if (from_top_ && bottom_ < top_ && !(released_->is_done(0) && backward_ended_())) {
            if (top_ - 1 == held_ && bottom_ < held_) {
                passed_held_ = true;
                --top_;
            }
            return --top_;
        }
        from_top_ = false;
        if (bottom_ < top_) return bottom_++;
        return std::exchange(passed_held_, false) ? held_ : -1;
    }
    // Whether the backward has let go of unit `unit`; wait until it has.
    bool ready(int unit) const { return released_ == nullptr || released_->is_done(unit); }
    void wait(int unit) const {
        if (released_ != nullptr) released_->wait_for(unit);
    }
    bool early() const { return released_ != nullptr; }

private:
    // taken: [0, bottom_) and [top_, units), and held_ once passed over on the way down
    int bottom_ = 0, top_, held_ = -1;
    bool from_top_ = false, passed_held_ = false;
    const ItemProgress* released_ = nullptr;
    std::function<bool()> backward_ended_;
};

}  // namespace sweetspot
