// Dropout as a pass of its own: on activations (launch_dropout) and on attention probabilities
// (launch_dropout_probabilities). p = 0.25 on both sides: the masks are drawn from the same
// counters (dropout.hpp), so the kept elements and their scale agree exactly; only the store to T
// rounds.
#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/compute/cpu_ops.hpp"
#include "kernels/compute/dropout.cuh"
#include "op_support.hpp"

namespace sweetspot::ops {

namespace {

constexpr float kP = 0.25f;

// The comparison, and an infinite error when the reference dropped nothing: these sizes always
// drop something at p = 0.25, so a mask that drops nothing on both sides is wrong too.
OpError compare_dropped(std::string_view output, const std::vector<float>& gpu, const std::vector<float>& cpu) {
    OpError error = compare(output, gpu, cpu);
    if (std::count(cpu.begin(), cpu.end(), 0.0f) == 0) {
        error.include(OpError{std::numeric_limits<double>::infinity(), 0, std::string(output) + ": nothing dropped"});
    }
    return error;
}

// dims: seq, positions, rows, width; x [rows, width], row r being (batch, position) r of a run of seq.
template <class T>
class DropoutCase final : public OpCase {
public:
    DropoutCase(const OpShape& shape, cudaStream_t stream)
        : d_(Dropout{kP, 42}.for_shape(static_cast<int>(shape.dims[0]), static_cast<int>(shape.dims[1]))),
          rows_(shape.dims[2]),
          width_(static_cast<int>(shape.dims[3])),
          x_(random_values(as_size(rows_) * as_size(width_), dtype, kSeed, 0.01f, 1.0f, Sign::either)),
          d_x_(x_, stream) {}

    void run(cudaStream_t stream) override { gpu::launch_dropout<T>(d_x_.get(), rows_, width_, d_, 3, stream); }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want = x_;
        cpu::dropout_rows(want.data(), rows_, width_, d_, 3);
        return compare_dropped("x", d_x_.to_host(stream), want);
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    Dropout d_;
    std::int64_t rows_;
    int width_;
    std::vector<float> x_;
    DeviceArray<T> d_x_;
};

// dims: seq, positions, rows; p [rows, seq], row r = (b·H + h)·seq + t.
template <class T>
class DropoutProbabilitiesCase final : public OpCase {
public:
    DropoutProbabilitiesCase(const OpShape& shape, cudaStream_t stream)
        : d_(Dropout{kP, 42}.for_shape(static_cast<int>(shape.dims[0]), static_cast<int>(shape.dims[1]))),
          rows_(shape.dims[2]),
          p_(random_values(as_size(rows_) * as_size(d_.seq), dtype, kSeed, 0.01f, 1.0f, Sign::either)),
          d_p_(p_, stream) {}

    void run(cudaStream_t stream) override { gpu::launch_dropout_probabilities<T>(d_p_.get(), rows_, d_, 5, stream); }

    OpError check(cudaStream_t stream) override {
        std::vector<float> want = p_;
        cpu::dropout_probabilities(want.data(), 0, rows_, d_, 5);
        return compare_dropped("p", d_p_.to_host(stream), want);
    }

private:
    static constexpr DType dtype = gpu::dtype_of<T>();
    Dropout d_;
    std::int64_t rows_;
    std::vector<float> p_;
    DeviceArray<T> d_p_;
};

OpShape rows_shape(int seq, int positions, std::int64_t rows, int width) {
    return op_shape({{"seq", seq}, {"positions", positions}, {"rows", rows}, {"width", width}});
}

OpShape probabilities_shape(int seq, int positions, std::int64_t rows) {
    return op_shape({{"seq", seq}, {"positions", positions}, {"rows", rows}});
}

}  // namespace

std::vector<OpEntry> dropout_ops() {
    std::vector<OpEntry> entries;
    entries.push_back(OpEntry{
        .name = "dropout",
        .family = "dropout",
        // A single position; seq short of positions (the stride is positions); width 7 and 77.
        .test_shapes = {rows_shape(1, 1, 3, 25), rows_shape(13, 40, 26, 77), rows_shape(7, 7, 70, 7)},
        // The residual stream [B·T, c], GPT-2 small and 1.5B at batch 8, seq 1024.
        .bench_shapes = {rows_shape(1024, 1024, 8 * 1024, 768), rows_shape(1024, 1024, 8 * 1024, 1600)},
        .tolerance = store_tolerance,
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(2.0 * static_cast<double>(s.dims[2] * s.dims[3]), dtype);  // x read and written
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<DropoutCase>(dtype, s, stream);
        },
    });
    entries.push_back(OpEntry{
        .name = "dropout_probabilities",
        .family = "dropout",
        // seq 1, 13 and 7 over 75 to 154 rows.
        .test_shapes = {probabilities_shape(1, 1, 75), probabilities_shape(13, 40, 154), probabilities_shape(7, 7, 70)},
        // The probabilities [B·H·T, T] of GPT-2 small (12 heads) and 1.5B (25) at batch 1, seq 1024.
        .bench_shapes = {probabilities_shape(1024, 1024, 12 * 1024), probabilities_shape(1024, 1024, 25 * 1024)},
        .tolerance = store_tolerance,
        .cost = [](const OpShape& s, DType dtype) {
            return memory_cost(2.0 * static_cast<double>(s.dims[2] * s.dims[0]), dtype);  // p read and written
        },
        .make = [](const OpShape& s, DType dtype, cudaStream_t stream) {
            return make_case<DropoutProbabilitiesCase>(dtype, s, stream);
        },
    });
    return entries;
}

}  // namespace sweetspot::ops
