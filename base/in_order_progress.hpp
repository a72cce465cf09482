#pragma once
// How far a worker going through items 0, 1, … in order has come, for threads that wait for one
// item: the worker reports, any other thread waits until the item it needs is done (GpuTrainStep's
// overlapped host update reports units; the next forward and a streaming backend's look-ahead wait
// for them). Thread-safe.
#include <condition_variable>
#include <exception>
#include <mutex>

namespace sweetspot {

class InOrderProgress {
public:
    // The worker starts: no item is done.
    void begin();
    // Item `item` is done (items are done in order).
    void done(int item);
    // The worker ended, every item done or `error` thrown on its thread.
    void end(std::exception_ptr error = nullptr);
    // Returns once item `item` is done, or at once when no worker is running; rethrows the
    // worker's error.
    void wait_for(int item) const;

private:
    mutable std::mutex mutex_;
    mutable std::condition_variable changed_;
    bool running_ = false;
    int done_ = 0;  // items 0 .. done_ − 1 are done
    std::exception_ptr error_;
};

}  // namespace sweetspot
