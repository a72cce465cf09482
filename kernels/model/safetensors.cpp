#include "kernels/model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "base/strict_json.hpp"
#include "kernels/model/checkpoint_error.hpp"

namespace sweetspot {
namespace {

using nlohmann::json;

// Tensor bytes are used in place, and safetensors stores them little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

struct DTypeInfo {
    std::string_view name;
    std::int64_t size;
    StoredType type;
};

// Every dtype of the safetensors specification with a whole number of bytes per element.
constexpr std::array<DTypeInfo, 16> kDTypes = {{
    {"F32", 4, StoredType::f32},     {"F16", 2, StoredType::f16},     {"BF16", 2, StoredType::bf16},
    {"F64", 8, StoredType::other},   {"F8_E5M2", 1, StoredType::other}, {"F8_E4M3", 1, StoredType::other},
    {"F8_E8M0", 1, StoredType::other}, {"BOOL", 1, StoredType::other},  {"U8", 1, StoredType::other},
    {"I8", 1, StoredType::other},    {"I16", 2, StoredType::other},   {"U16", 2, StoredType::other},
    {"I32", 4, StoredType::other},   {"U32", 4, StoredType::other},   {"I64", 8, StoredType::other},
    {"U64", 8, StoredType::other},
}};

constexpr std::size_t kLengthBytes = 8;

std::string count_of(std::uint64_t n, const char* unit) {
    return std::to_string(n) + " " + unit + (n == 1 ? "" : "s");
}

[[noreturn]] void not_safetensors(const std::string& label, const std::string& why) {
    throw CheckpointError(label + ": not a safetensors file: " + why);
}

// The header length the first 8 bytes give, once the first bytes show the file may be safetensors.
// Text, databases and most binary formats fail here: read as a length, their first 8 bytes give
// far more than any header may have.
std::uint64_t header_length(std::span<const std::byte> file, const std::string& label) {
    if (file.size() < kLengthBytes)
        not_safetensors(label, count_of(file.size(), "byte") +
                                   ", fewer than the 8-byte header length a safetensors file begins with (is it truncated?)");
    std::uint64_t n = 0;
    std::memcpy(&n, file.data(), kLengthBytes);
    if (n > kMaxSafetensorsHeaderBytes)
        not_safetensors(label, "its first 8 bytes give a header length of " + std::to_string(n) + ", over the " +
                                   std::to_string(kMaxSafetensorsHeaderBytes) + " bytes a safetensors header may have");
    if (file.size() > kLengthBytes && file[kLengthBytes] != std::byte{'{'})
        not_safetensors(label, "the header after the 8-byte length does not begin with '{'");
    return n;
}

// A tensor with the byte range its header entry gives, relative to the data section.
struct Entry {
    StoredTensor tensor;
    std::uint64_t begin = 0, end = 0;
};

class HeaderReader {
public:
    HeaderReader(const std::string& label, std::uint64_t data_size) : label_(label), data_size_(data_size) {}

    [[noreturn]] void fail(const std::string& message) const { throw CheckpointError(label_ + ": " + message); }

    void check_metadata(const json& m) const {
        if (!m.is_object()) fail("\"__metadata__\" must be an object of strings, got " + json_excerpt(m));
        for (const auto& [key, value] : m.items()) {
            if (!value.is_string()) fail("\"__metadata__\" entry " + quoted_name(key) + " must be a string, got " + json_excerpt(value));
        }
    }

    // One tensor entry: {"dtype": ..., "shape": [...], "data_offsets": [begin, end]}.
    Entry read_entry(const std::string& name, const json& entry) const {
        const std::string what = "tensor " + quoted_name(name);
        if (!entry.is_object()) fail(what + " must be an object with dtype, shape and data_offsets, got " + json_excerpt(entry));
        for (const auto& [key, value] : entry.items()) {
            if (key != "dtype" && key != "shape" && key != "data_offsets")
                fail(what + " has an unknown field " + quoted_name(key) + " (expected dtype, shape, data_offsets)");
        }
        for (const char* key : {"dtype", "shape", "data_offsets"}) {
            if (!entry.contains(key)) fail(what + " has no \"" + key + "\"");
        }
        Entry e;
        StoredTensor& t = e.tensor;
        t.name = name;
        const DTypeInfo& dtype = read_dtype(what, entry.at("dtype"));
        t.dtype = dtype.name;
        t.type = dtype.type;

        const json& shape = entry.at("shape");
        if (!shape.is_array()) fail(what + ": \"shape\" must be an array of non-negative integers, got " + json_excerpt(shape));
        for (const json& d : shape) {
            const std::uint64_t dim = non_negative(what + ": shape", d);
            if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                fail(what + ": shape dimension " + json_excerpt(d) + " is too large");
            const auto n = static_cast<std::int64_t>(dim);
            if (n != 0 && t.numel > std::numeric_limits<std::int64_t>::max() / n)
                fail(what + ": shape " + json_excerpt(shape) + " has more elements than can be counted");
            t.numel *= n;
            t.shape.push_back(n);
        }

        const json& offsets = entry.at("data_offsets");
        if (!offsets.is_array() || offsets.size() != 2)
            fail(what + ": \"data_offsets\" must be [begin, end], got " + json_excerpt(offsets));
        const std::uint64_t begin = non_negative(what + ": data_offsets", offsets[0]);
        const std::uint64_t end = non_negative(what + ": data_offsets", offsets[1]);
        if (begin > end) fail(what + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] end before they begin");
        if (end > data_size_)
            fail(what + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                 "] run past the end of the data section (" + std::to_string(data_size_) + " bytes); the file is truncated or corrupt");
        // numel ≤ the data section's size here or the comparison below fails first, so no overflow.
        const std::uint64_t span = end - begin;
        if (static_cast<std::uint64_t>(t.numel) > span || static_cast<std::uint64_t>(t.numel) * dtype.size != span)
            fail(what + ": " + std::to_string(span) + " bytes in data_offsets, but shape " + json_excerpt(shape) + " of " +
                 t.dtype + " needs " + std::to_string(t.numel) + " × " + std::to_string(dtype.size) + " bytes");
        e.begin = begin;
        e.end = end;
        return e;
    }

private:
    const DTypeInfo& read_dtype(const std::string& what, const json& d) const {
        if (!d.is_string()) fail(what + ": \"dtype\" must be a string, got " + json_excerpt(d));
        const auto& s = d.get_ref<const std::string&>();
        const auto it = std::find_if(kDTypes.begin(), kDTypes.end(), [&](const DTypeInfo& i) { return i.name == s; });
        if (it == kDTypes.end()) fail(what + " has unknown dtype " + json_excerpt(d));
        return *it;
    }

    std::uint64_t non_negative(const std::string& what, const json& v) const {
        if (!v.is_number_unsigned()) fail(what + " must hold non-negative integers, got " + json_excerpt(v));
        return v.get<std::uint64_t>();
    }

    const std::string& label_;
    std::uint64_t data_size_;
};

// Bytes of the data section after the last tensor. When they are as many leading spaces, the
// header length is most likely short by that much: the data section then starts inside the
// header's space padding, and every tensor would be read that many bytes early.
std::string after_last_tensor(std::span<const std::byte> data, std::uint64_t end) {
    const std::uint64_t extra = data.size() - end;
    const std::string what = count_of(extra, "byte") + " after the last tensor's data (the data section has " +
                             count_of(data.size(), "byte") + ", its tensors end at byte " + std::to_string(end) + ")";
    const auto lead = data.first(static_cast<std::size_t>(extra));
    if (std::all_of(lead.begin(), lead.end(), [](std::byte b) { return b == std::byte{' '}; }))
        return what + "; the header length looks " + count_of(extra, "byte") +
               " too small, as the data section begins with that many spaces of header padding";
    return what + "; bytes were appended to the file, or its header length is too small";
}

// The reference reader's rule: sorted by (begin, end), each tensor's byte range begins where the
// one before ended, so that each byte of the data section belongs to exactly one tensor. An empty
// tensor owns no byte, but it still has to begin where the tensors before it ended: between two
// tensors or at either end of the data section, never inside a tensor (the reference reader
// refuses that too). Sorting by the end as well puts an empty tensor before the one that begins
// where it does, instead of after it, where it would look like an overlap.
void require_tiling(const std::vector<Entry>& entries, std::span<const std::byte> data, const HeaderReader& reader) {
    std::vector<const Entry*> by_offsets;
    for (const auto& e : entries) by_offsets.push_back(&e);
    std::sort(by_offsets.begin(), by_offsets.end(),
              [](const Entry* a, const Entry* b) { return std::pair(a->begin, a->end) < std::pair(b->begin, b->end); });
    const Entry* previous = nullptr;  // the last tensor that owns bytes: the one ending at `covered`
    std::uint64_t covered = 0;
    auto bytes_of = [](const Entry* e) { return "(bytes " + std::to_string(e->begin) + ".." + std::to_string(e->end) + ")"; };
    for (const Entry* e : by_offsets) {
        const bool empty = e->begin == e->end;
        if (e->begin < covered && empty)
            reader.fail("tensor " + quoted_name(e->tensor.name) + " is empty, but its data_offsets [" + std::to_string(e->begin) +
                        ", " + std::to_string(e->end) + "] point inside tensor " + quoted_name(previous->tensor.name) + " " +
                        bytes_of(previous) + "; an empty tensor can only sit where one tensor ends and the next begins");
        if (e->begin < covered)
            reader.fail("tensors " + quoted_name(previous->tensor.name) + " " + bytes_of(previous) + " and " +
                        quoted_name(e->tensor.name) + " " + bytes_of(e) + " overlap");
        if (e->begin > covered)
            reader.fail("bytes " + std::to_string(covered) + ".." + std::to_string(e->begin) +
                        " of the data section belong to no tensor (" +
                        (previous ? "between " + quoted_name(previous->tensor.name) + " and " : "before ") +
                        quoted_name(e->tensor.name) + ")");
        if (empty) continue;
        covered = e->end;
        previous = e;
    }
    if (covered == data.size()) return;
    if (previous == nullptr)
        reader.fail("the data section has " + count_of(data.size(), "byte") + ", but the header gives no tensor any of them");
    reader.fail(after_last_tensor(data, covered));
}

}  // namespace

std::string quoted_name(std::string_view name) {
    constexpr std::size_t kMaxShown = 120;
    std::string s = "'";
    s += name.substr(0, kMaxShown);
    s += name.size() > kMaxShown ? "...'" : "'";
    return s;
}

std::vector<StoredTensor> parse_safetensors(std::span<const std::byte> file, const std::string& label) {
    const std::uint64_t header_bytes = header_length(file, label);
    const std::uint64_t rest = file.size() - kLengthBytes;
    if (header_bytes > rest)
        throw CheckpointError(label + ": the header length " + std::to_string(header_bytes) + " runs past the end of the file (" +
                              std::to_string(rest) + " bytes follow it); the file is truncated");

    const std::string_view text(reinterpret_cast<const char*>(file.data() + kLengthBytes), header_bytes);
    const json header = parse_strict_json(text, label, "the header");
    const auto data = file.subspan(kLengthBytes + header_bytes);
    HeaderReader reader(label, data.size());

    std::vector<Entry> entries;
    for (const auto& [name, entry] : header.items()) {
        if (name == "__metadata__") reader.check_metadata(entry);
        else entries.push_back(reader.read_entry(name, entry));
    }
    require_tiling(entries, data, reader);
    std::vector<StoredTensor> tensors;
    for (auto& e : entries) {
        e.tensor.bytes = data.subspan(e.begin, e.end - e.begin);
        tensors.push_back(std::move(e.tensor));
    }
    return tensors;
}

void require_safetensors_start(const std::filesystem::path& path) {
    const MappedFile file(path);
    header_length(file.bytes(), path.string());
}

MappedFile::MappedFile(const std::filesystem::path& path) {
    const auto fail = [&](const std::string& what) {
        return CheckpointError(path.string() + ": cannot " + what + ": " + std::strerror(errno));
    };
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw fail("open");
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const auto e = fail("stat");
        ::close(fd);
        throw e;
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw CheckpointError(path.string() + ": not a regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    // mmap refuses a length of 0; an empty file simply has no bytes.
    if (size_ > 0) {
        void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const auto e = fail("map");
            ::close(fd);
            throw e;
        }
        data_ = static_cast<const std::byte*>(p);
    }
    ::close(fd);  // the mapping keeps the file
}

MappedFile::~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

}  // namespace sweetspot
