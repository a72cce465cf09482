#pragma once
// CUPTI activity records → sweetspot's plain event records (harness/collect/events.hpp). Pure: fed with
// synthetic records, it is tested without a GPU.
#include <cupti_activity.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "harness/collect/events.hpp"

namespace sweetspot {

class CuptiRecordReader {
public:
    // Adds what one record says; kinds sweetspot does not collect are ignored, and so are
    // markers outside the `sweetspot` NVTX domain.
    void add(const CUpti_Activity* record);
    // Everything read so far, the API calls named; ranges whose end marker never came are dropped.
    CellEvents take();

private:
    void add_kernel(const CUpti_ActivityKernel10& k);
    void add_memcpy(const CUpti_ActivityMemcpy6& m);
    void add_unified_memory(const CUpti_ActivityUnifiedMemoryCounter3& u);
    void add_marker(const CUpti_ActivityMarker2& m);
    void add_api_call(const CUpti_ActivityAPI& a, bool driver);
    void add_overhead(const CUpti_ActivityOverhead3& o);
    void name_api_calls();

    // The function of an API call record, named when the events are taken.
    struct ApiFunction {
        bool driver = false;
        CUpti_CallbackId cbid = 0;
        auto operator<=>(const ApiFunction&) const = default;
    };

    CellEvents events_;
    std::vector<ApiFunction> api_functions_;  // one per events_.api_calls
    std::unordered_map<std::uint32_t, RangeRecord> open_ranges_;  // by marker id
};

// Nsight Systems' copyKind values for Unified Memory migrations.
inline constexpr std::int32_t kUnifiedHtoD = 11;
inline constexpr std::int32_t kUnifiedDtoH = 12;

}  // namespace sweetspot
