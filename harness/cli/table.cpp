#include "harness/cli/table.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace sweetspot {

void TextTable::add_column(std::string header, Align align) {
    headers_.push_back(std::move(header));
    aligns_.push_back(align);
}

void TextTable::add_row(std::vector<std::string> cells) {
    if (cells.size() != headers_.size()) throw std::invalid_argument("TextTable: row width differs from header");
    rows_.push_back(std::move(cells));
}

void TextTable::print(std::ostream& out) const {
    std::vector<std::size_t> width(headers_.size());
    for (std::size_t c = 0; c < headers_.size(); ++c) {
        width[c] = headers_[c].size();
        for (const auto& r : rows_) width[c] = std::max(width[c], r[c].size());
    }
    auto line = [&](const std::vector<std::string>& cells) {
        std::string s;
        for (std::size_t c = 0; c < cells.size(); ++c) {
            const std::string pad(width[c] - cells[c].size(), ' ');
            s += aligns_[c] == Align::right ? pad + cells[c] : cells[c] + pad;
            if (c + 1 < cells.size()) s += "  ";
        }
        s.erase(s.find_last_not_of(' ') + 1);
        out << s << "\n";
    };
    line(headers_);
    std::vector<std::string> rule;
    for (auto w : width) rule.emplace_back(w, '-');
    line(rule);
    for (const auto& r : rows_) line(r);
}

}  // namespace sweetspot
