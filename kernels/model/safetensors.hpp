#pragma once
// Reading the safetensors format (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON naming each tensor's dtype, shape and byte range,
// then the tensor bytes. The file is memory-mapped; nothing is copied until a caller converts a
// tensor into its own buffer.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sweetspot {

// The element types a weight can be read from; every other safetensors dtype is `other`.
enum class StoredType { f32, f16, bf16, other };

struct StoredTensor {
    std::string name;
    std::string dtype;                  // as written in the file, e.g. "F16"
    StoredType type = StoredType::other;
    std::vector<std::int64_t> shape;
    std::int64_t numel = 1;
    std::span<const std::byte> bytes;   // numel × the dtype's size, inside the file's data section
};

// Safetensors, like the rest of the Hugging Face tooling, caps headers at 100 MB.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Checks the whole header of `file` (the complete file's bytes) before any tensor byte is looked
// at: the file starts as safetensors does (see require_safetensors_start), the header length fits
// the file, the header is strict JSON of the safetensors schema, every dtype is known, shapes
// multiply without overflow, each tensor's byte range matches its dtype size × element count, and
// the ranges tile the data section: no overlap, no gap, no byte after the last tensor, no empty
// tensor pointing inside another. Returns the tensors in file order (their spans point into
// `file`), or throws CheckpointError naming `label`.
std::vector<StoredTensor> parse_safetensors(std::span<const std::byte> file, const std::string& label);

// A name from a checkpoint in quotes, as messages show it: cut short, since a file may hold any name.
std::string quoted_name(std::string_view name);

// Throws CheckpointError "<path>: not a safetensors file: ..." when the file's first bytes rule it
// out: fewer than the 8-byte header length, a header length over kMaxSafetensorsHeaderBytes, or a
// header that does not open with '{' (the reference reader's rule). Cheap: it looks at 9 bytes.
void require_safetensors_start(const std::filesystem::path& path);

// A whole file mapped read-only, unmapped when the object goes.
class MappedFile {
public:
    // Throws CheckpointError when the file cannot be opened or mapped.
    explicit MappedFile(const std::filesystem::path& path);
    ~MappedFile();
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    std::span<const std::byte> bytes() const { return {data_, size_}; }

private:
    const std::byte* data_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace sweetspot
