#include "harness/system/format.hpp"

#include <cstdio>

namespace sweetspot {

std::string fixed(double v, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}

std::string human_bytes(double bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (bytes >= 1024 && u < 4) {
        bytes /= 1024;
        ++u;
    }
    return u == 0 ? fixed(bytes, 0) + " B" : fixed(bytes, bytes < 10 ? 2 : 1) + " " + units[u];
}

}  // namespace sweetspot
