#pragma once
// NVTX ranges in the `sweetspot` domain: run › cell › iteration › unit (WeightLayout::unit_name) ›
// acquire / compute / release, a training step's forward / backward / update around its units,
// and the transfers the backends name for their unit (results/README.md, NVTX_EVENTS). They show
// up in Nsight Systems when a user runs a cell under it, and in sweetspot's own collector through
// CUPTI's marker activity. Start/end ranges (not push/pop) so that CUPTI reports each one as a
// start and an end marker with the same id.
#include <nvtx3/nvToolsExt.h>

#include <string>

namespace sweetspot {

// The domain handle, created on first use (NVTX keeps it for the life of the process).
inline nvtxDomainHandle_t nvtx_domain() {
    static const nvtxDomainHandle_t domain = nvtxDomainCreateA("sweetspot");
    return domain;
}

class NvtxRange {
public:
    explicit NvtxRange(const std::string& text) {
        nvtxEventAttributes_t attributes{};
        attributes.version = NVTX_VERSION;
        attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
        attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
        attributes.message.ascii = text.c_str();
        id_ = nvtxDomainRangeStartEx(nvtx_domain(), &attributes);
    }
    ~NvtxRange() { nvtxDomainRangeEnd(nvtx_domain(), id_); }
    NvtxRange(const NvtxRange&) = delete;
    NvtxRange& operator=(const NvtxRange&) = delete;

private:
    nvtxRangeId_t id_ = 0;
};

}  // namespace sweetspot
