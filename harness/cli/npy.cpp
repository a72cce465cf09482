#include "harness/cli/npy.hpp"

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace sweetspot {

static_assert(std::endian::native == std::endian::little, "the header declares '<f4' or '<f8' and the data is written as is");

std::string npy_header(std::span<const std::int64_t> shape, const std::string& descr) {
    std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
    for (std::size_t i = 0; i < shape.size(); ++i) dict += (i ? ", " : "") + std::to_string(shape[i]);
    if (shape.size() == 1) dict += ',';  // a Python one-tuple
    dict += "), }";
    // Magic (6) + version (2) + header length (2) + dict + '\n' must be a multiple of 64 bytes,
    // so the data that follows is aligned.
    constexpr std::size_t kPrefix = 10, kAlign = 64;
    const std::size_t unpadded = kPrefix + dict.size() + 1;
    dict.append((kAlign - unpadded % kAlign) % kAlign, ' ');
    dict += '\n';
    const auto len = static_cast<std::uint16_t>(dict.size());
    std::string header = "\x93NUMPY";
    header += '\x01';
    header += '\x00';
    header += static_cast<char>(len & 0xFF);
    header += static_cast<char>(len >> 8);
    return header + dict;
}

namespace {

template <typename T>
void write_array(const std::string& path, std::span<const T> values, std::span<const std::int64_t> shape,
                 const std::string& descr) {
    std::int64_t numel = 1;
    for (const auto d : shape) numel *= d;
    if (numel != static_cast<std::int64_t>(values.size()))
        throw std::invalid_argument("write_npy: the shape has " + std::to_string(numel) + " elements, the data " +
                                    std::to_string(values.size()));
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
    const std::string header = npy_header(shape, descr);
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size_bytes()));
    out.close();
    if (!out) throw std::runtime_error("writing " + path + " failed");
}

}  // namespace

void write_npy(const std::string& path, std::span<const float> values, std::span<const std::int64_t> shape) {
    write_array(path, values, shape, "<f4");
}

void write_npy(const std::string& path, std::span<const double> values, std::span<const std::int64_t> shape) {
    write_array(path, values, shape, "<f8");
}

}  // namespace sweetspot
