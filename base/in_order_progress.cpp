#include "base/in_order_progress.hpp"

namespace sweetspot {

void InOrderProgress::begin() {
    const std::lock_guard lock(mutex_);
    running_ = true;
    done_ = 0;
    error_ = nullptr;
}

void InOrderProgress::done(int item) {
    {
        const std::lock_guard lock(mutex_);
        done_ = item + 1;
    }
    changed_.notify_all();
}

void InOrderProgress::end(std::exception_ptr error) {
    {
        const std::lock_guard lock(mutex_);
        running_ = false;
        error_ = error;
    }
    changed_.notify_all();
}

void InOrderProgress::wait_for(int item) const {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !running_ || done_ > item; });
    if (error_) std::rethrow_exception(error_);
}

}  // namespace sweetspot
