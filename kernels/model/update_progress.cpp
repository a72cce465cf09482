#include "kernels/model/update_progress.hpp"

namespace sweetspot {

void UpdateProgress::begin() {
    const std::lock_guard lock(mutex_);
    in_flight_ = true;
    done_ = 0;
    error_ = nullptr;
}

void UpdateProgress::unit_done(int unit) {
    {
        const std::lock_guard lock(mutex_);
        done_ = unit + 1;
    }
    changed_.notify_all();
}

void UpdateProgress::end(std::exception_ptr error) {
    {
        const std::lock_guard lock(mutex_);
        in_flight_ = false;
        error_ = error;
    }
    changed_.notify_all();
}

void UpdateProgress::wait_for(int unit) const {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !in_flight_ || done_ > unit; });
    if (error_) std::rethrow_exception(error_);
}

}  // namespace sweetspot
