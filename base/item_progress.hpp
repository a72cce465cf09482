#pragma once
// Which of items 0 .. n − 1 a worker has done, in whatever order it does them, for threads that
// wait for one item: the worker reports, any other thread waits until the item it needs is done.
// GpuTrainStep's host update reports units (in order after the backward, or from the top down
// while the backward makes their gradients and then up from 0); the next forward and a streaming
// backend's look-ahead wait for them. Thread-safe.
#include <condition_variable>
#include <exception>
#include <mutex>
#include <vector>

namespace sweetspot {

class ItemProgress {
public:
    // The worker starts on `items` items: none is done.
    void begin(int items);
    // Item `item` is done.
    void done(int item);
    // The worker ended, every item done or `error` thrown on its thread.
    void end(std::exception_ptr error = nullptr);
    // Returns once item `item` is done, or at once when no worker is running; rethrows the
    // worker's error.
    void wait_for(int item) const;
    // Whether wait_for(item) would return at once (an error still to rethrow counts as done).
    bool is_done(int item) const;

private:
    bool done_locked(int item) const;

    mutable std::mutex mutex_;
    mutable std::condition_variable changed_;
    bool running_ = false;
    std::vector<char> done_;  // by item
    std::exception_ptr error_;
};

}  // namespace sweetspot
