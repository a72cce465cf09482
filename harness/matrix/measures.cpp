#include "harness/matrix/measures.hpp"

namespace sweetspot {

const Measure* find_measure(std::string_view name) {
    for (const Measure& m : kMeasures)
        if (m.name == name) return &m;
    return nullptr;
}

}  // namespace sweetspot
