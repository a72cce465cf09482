// Every op entry (tests/ops/op_entry.hpp) in every dtype and test shape against its CPU operation:
// llm.c's habit of giving each kernel its own reference, so a wrong kernel is named by its section
// ("layernorm_backward bf16 rows 13 c 75") rather than found as a logits mismatch of the whole
// forward. bench_kernels times the same entries.
#include <cuda_runtime_api.h>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch_test_macros.hpp>

#include "kernels/compute/cuda_resources.hpp"
#include "ops/op_entry.hpp"
#include "ops/op_support.hpp"
#include "gpu_test_support.hpp"

using namespace sweetspot;

TEST_CASE("every op entry matches its CPU operation in every dtype and test shape", "[gpu]") {
    sweetspot::test::require_gpu();
    const CudaStream stream;
    for (const ops::OpEntry& entry : ops::op_entries()) {
        for (const DType dtype : entry.dtypes) {
            for (const ops::OpShape& shape : entry.test_shapes) {
                DYNAMIC_SECTION(entry.name << " " << enum_name(dtype) << " " << shape.text) {
                    const auto op = entry.make(shape, dtype, stream.get());
                    op->run(stream.get());
                    const ops::OpError error = op->check(stream.get());
                    const double tolerance = entry.tolerance(dtype);
                    INFO("relative error " << error.rel_err << ", tolerance " << tolerance << "; worst " << error.worst);
                    CHECK(error.nonfinite == 0);
                    CHECK(error.rel_err <= tolerance);
                }
            }
        }
    }
}

TEST_CASE("op entries have unique names, shapes of their own dimensions, and every function") {
    std::set<std::string> names;
    for (const ops::OpEntry& entry : ops::op_entries()) {
        INFO(entry.name);
        CHECK(names.insert(entry.name).second);
        CHECK_FALSE(entry.family.empty());
        CHECK_FALSE(entry.test_shapes.empty());
        CHECK_FALSE(entry.bench_shapes.empty());
        CHECK_FALSE(entry.dtypes.empty());
        CHECK(entry.tolerance);
        CHECK(entry.cost);
        CHECK(entry.make);
        const auto& first = entry.test_shapes.front();
        for (const auto* shapes : {&entry.test_shapes, &entry.bench_shapes}) {
            for (const ops::OpShape& shape : *shapes) CHECK(shape.dims.size() == first.dims.size());
        }
        for (const DType dtype : entry.dtypes) CHECK(entry.tolerance(dtype) >= 0.0);
    }
}

TEST_CASE("compare measures max |gpu - cpu| / max |cpu| and counts what the GPU left non-finite") {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // max |gpu − cpu| = 0.5 (third element), max |cpu| = 4: 0.125; the NaN is counted, not measured.
    const ops::OpError e = ops::compare("dx", {1.0f, -2.0f, 3.5f, nan}, {1.0f, -2.25f, 4.0f, 1.0f});
    CHECK(e.rel_err == 0.125);
    CHECK(e.nonfinite == 1);
    CHECK(e.worst.starts_with("dx:"));
    // An all-zero reference cannot judge: infinite.
    CHECK(ops::compare("dx", {0.0f}, {0.0f}).rel_err == std::numeric_limits<double>::infinity());

    ops::OpError total = ops::compare("dw", {2.0f}, {2.0f});
    total.include(e);
    total.include(ops::compare("db", {1.0f, nan}, {1.0f, 1.0f}));
    CHECK(total.rel_err == 0.125);
    CHECK(total.nonfinite == 2);
    CHECK(total.worst.starts_with("dx:"));

    CHECK(ops::require_equal("fused", {1.0f, 2.0f}, {1.0f, 2.0f}).rel_err == 0.0);
    CHECK(ops::require_equal("fused", {1.0f, 2.0f}, {1.0f, std::nextafter(2.0f, 3.0f)}).rel_err ==
          std::numeric_limits<double>::infinity());
}

TEST_CASE("op_shape names each dimension in the text") {
    const ops::OpShape s = ops::op_shape({{"rows", 13}, {"c", 75}});
    CHECK(s.dims == std::vector<std::int64_t>{13, 75});
    CHECK(s.text == "rows 13 c 75");
}
