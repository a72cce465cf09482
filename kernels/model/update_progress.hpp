#pragma once
// How far an optimizer update running beside the caller has come (GpuTrainStep's overlapped host
// update): it updates the units in order 0, 1, …, and the next forward's reads of a unit's weights
// wait until that unit's update is done. Thread-safe: the update's thread reports, the forward's
// thread (the compute, or a backend fetching a unit ahead) waits.
#include <condition_variable>
#include <exception>
#include <mutex>

namespace sweetspot {

class UpdateProgress {
public:
    // An update starts: no unit is done.
    void begin();
    // Unit `unit`'s new weights are written (units are done in order).
    void unit_done(int unit);
    // The update ended, every unit done or `error` thrown on its thread.
    void end(std::exception_ptr error = nullptr);
    // Returns once unit `unit`'s update is done, or at once when no update is in flight; rethrows
    // the update's error.
    void wait_for(int unit) const;

private:
    mutable std::mutex mutex_;
    mutable std::condition_variable changed_;
    bool in_flight_ = false;
    int done_ = 0;  // units 0 .. done_ − 1 are done
    std::exception_ptr error_;
};

}  // namespace sweetspot
