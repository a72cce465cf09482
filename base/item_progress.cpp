#include "base/item_progress.hpp"

#include <cstddef>

namespace sweetspot {

void ItemProgress::begin(int items) {
    const std::lock_guard lock(mutex_);
    running_ = true;
    done_.assign(static_cast<std::size_t>(items), 0);
    error_ = nullptr;
}

void ItemProgress::done(int item) {
    {
        const std::lock_guard lock(mutex_);
        done_.at(static_cast<std::size_t>(item)) = 1;
    }
    changed_.notify_all();
}

void ItemProgress::end(std::exception_ptr error) {
    {
        const std::lock_guard lock(mutex_);
        running_ = false;
        error_ = error;
    }
    changed_.notify_all();
}

bool ItemProgress::done_locked(int item) const {
    const auto i = static_cast<std::size_t>(item);
    return !running_ || (item >= 0 && i < done_.size() && done_[i] != 0);
}

void ItemProgress::wait_for(int item) const {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return done_locked(item); });
    if (error_) std::rethrow_exception(error_);
}

bool ItemProgress::is_done(int item) const {
    const std::lock_guard lock(mutex_);
    return done_locked(item);
}

}  // namespace sweetspot
