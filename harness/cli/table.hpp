#pragma once
// Plain-text tables for the terminal (list, summary): columns sized to their content,
// numbers right-aligned.
#include <ostream>
#include <string>
#include <vector>

namespace sweetspot {

class TextTable {
public:
    enum class Align { left, right };
    void add_column(std::string header, Align align = Align::left);
    void add_row(std::vector<std::string> cells);
    void print(std::ostream& out) const;
    bool empty() const { return rows_.empty(); }

private:
    std::vector<std::string> headers_;
    std::vector<Align> aligns_;
    std::vector<std::vector<std::string>> rows_;
};

}  // namespace sweetspot
