#include "harness/matrix/shard.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace sweetspot {

ShardSpec parse_shard(const std::string& text) {
    const auto slash = text.find('/');
    const auto number = [&](const std::string& part) {
        if (part.empty() || part.size() > 6 || !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }))
            throw std::invalid_argument("--shard expects i/N with whole numbers 1 <= i <= N, such as 2/8, got '" + text + "'");
        return std::stoi(part);
    };
    if (slash == std::string::npos)
        throw std::invalid_argument("--shard expects i/N with whole numbers 1 <= i <= N, such as 2/8, got '" + text + "'");
    const ShardSpec s{number(text.substr(0, slash)), number(text.substr(slash + 1))};
    if (s.count < 1 || s.index < 1 || s.index > s.count)
        throw std::invalid_argument("--shard expects i/N with whole numbers 1 <= i <= N, such as 2/8, got '" + text + "'");
    return s;
}

double shard_cost(const CellParams& cell) {
    const auto forwards = static_cast<double>(cell.warmups + cell.iterations + cell.trace_iterations + 1);
    return static_cast<double>(cell.weight_bytes()) * forwards;
}

std::vector<std::size_t> shard_positions(const std::vector<CellParams>& cells, ShardSpec spec) {
    std::vector<std::size_t> order(cells.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::vector<double> cost(cells.size());
    for (std::size_t i = 0; i < cells.size(); ++i) cost[i] = shard_cost(cells[i]);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return cost[a] > cost[b]; });
    std::vector<double> load(static_cast<std::size_t>(spec.count), 0.0);
    std::vector<std::size_t> mine;
    for (const std::size_t i : order) {
        const auto lightest = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        load[lightest] += cost[i];
        if (static_cast<int>(lightest) == spec.index - 1) mine.push_back(i);
    }
    std::sort(mine.begin(), mine.end());
    return mine;
}

}  // namespace sweetspot
