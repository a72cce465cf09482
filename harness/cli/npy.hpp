#pragma once
// NumPy's .npy format (version 1.0), written so that numpy.load and any other reader of the
// format can compare our outputs with theirs.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sweetspot {

// The header of a C-order little-endian array of `shape` whose elements are `descr` ("<f4"
// float32, "<f8" float64), padded as the format asks.
std::string npy_header(std::span<const std::int64_t> shape, const std::string& descr = "<f4");

// Writes `values` (the product of `shape` elements) as a float32 or float64 .npy file; throws
// std::invalid_argument on a size mismatch and std::runtime_error when the file cannot be written.
void write_npy(const std::string& path, std::span<const float> values, std::span<const std::int64_t> shape);
void write_npy(const std::string& path, std::span<const double> values, std::span<const std::int64_t> shape);

}  // namespace sweetspot
