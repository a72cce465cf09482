#include "kernels/model/checkpoint_tensors.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "base/strict_json.hpp"
#include "kernels/model/checkpoint_error.hpp"

namespace sweetspot {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// An index is a line per tensor: under a megabyte for the largest published models. A file far
// larger is no index, and parsing it would only take memory.
constexpr std::size_t kMaxIndexBytes = 16 << 20;

struct ShardIndex {
    std::map<std::string, std::string> shard_of;  // tensor name → shard file name
    std::set<std::string> shards;                 // sorted, so the tensors come in the same order every time
    std::optional<std::uint64_t> total_size;
};

// A shard must be a file beside the index; a name with a directory part could reach anywhere.
// A NUL would end the name early when the file is opened.
bool plain_file_name(const std::string& name) {
    return !name.empty() && name != "." && name != ".." &&
           name.find_first_of(std::string_view("/\\\0", 3)) == std::string::npos;
}

ShardIndex read_index(const fs::path& path) {
    const std::string label = path.string();
    const auto fail = [&](const std::string& message) { return CheckpointError(label + ": " + message); };
    const MappedFile file(path);
    const auto bytes = file.bytes();
    if (bytes.size() > kMaxIndexBytes)
        throw fail(std::to_string(bytes.size()) + " bytes is too large for a shard index");
    const json index = parse_strict_json(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                                         label, "the shard index");
    if (!index.is_object()) throw fail("the shard index must be a JSON object, got " + json_excerpt(index));
    if (!index.contains("weight_map")) throw fail("the shard index has no \"weight_map\" (which shard holds each tensor)");
    const json& map = index.at("weight_map");
    if (!map.is_object() || map.empty())
        throw fail("\"weight_map\" must be an object giving each tensor's shard, got " + json_excerpt(map));

    ShardIndex out;
    for (const auto& [tensor, shard] : map.items()) {
        if (!shard.is_string())
            throw fail("\"weight_map\" gives tensor " + quoted_name(tensor) + " the shard " + json_excerpt(shard) +
                       ", not a file name");
        const auto& name = shard.get_ref<const std::string&>();
        if (!plain_file_name(name))
            throw fail("shard " + quoted_name(name) + " (of tensor " + quoted_name(tensor) +
                       ") is not a plain file name: shards must be files in the index's directory");
        out.shard_of.emplace(tensor, name);
        out.shards.insert(name);
    }
    if (!index.contains("metadata")) return out;
    const json& metadata = index.at("metadata");
    if (!metadata.is_object()) throw fail("\"metadata\" must be an object, got " + json_excerpt(metadata));
    if (metadata.contains("total_size")) {
        const json& total = metadata.at("total_size");
        if (!total.is_number_unsigned())
            throw fail("\"total_size\" must be a non-negative integer, got " + json_excerpt(total));
        out.total_size = total.get<std::uint64_t>();
    }
    return out;
}

}  // namespace

CheckpointTensors CheckpointTensors::open_file(const fs::path& file) {
    CheckpointTensors out;
    out.tensors_ = parse_safetensors(out.files_.emplace_back(file).bytes(), file.string());
    return out;
}

CheckpointTensors CheckpointTensors::open_sharded(const fs::path& index_path) {
    const ShardIndex index = read_index(index_path);
    const std::string label = index_path.string();
    const auto fail = [&](const std::string& message) { return CheckpointError(label + ": " + message); };

    CheckpointTensors out;
    std::map<std::string, const std::string*> found_in;  // tensor name → the shard holding it
    for (const std::string& shard : index.shards) {
        const fs::path file = index_path.parent_path() / shard;
        std::error_code ec;
        if (!fs::exists(file, ec))
            throw fail("shard " + quoted_name(shard) + " is missing (no " + file.string() + ")");
        for (StoredTensor& t : parse_safetensors(out.files_.emplace_back(file).bytes(), file.string())) {
            const auto [at, first] = found_in.emplace(t.name, &shard);
            if (!first)
                throw fail("tensor " + quoted_name(t.name) + " is in two shards, " + quoted_name(*at->second) + " and " +
                           quoted_name(shard));
            out.tensors_.push_back(std::move(t));
        }
    }
    for (const auto& [tensor, shard] : found_in) {
        const auto listed = index.shard_of.find(tensor);
        if (listed == index.shard_of.end())
            throw fail("shard " + quoted_name(*shard) + " holds tensor " + quoted_name(tensor) +
                       ", which the index's weight_map does not list");
        if (listed->second != *shard)
            throw fail("the index maps tensor " + quoted_name(tensor) + " to shard " + quoted_name(listed->second) +
                       ", but it is in shard " + quoted_name(*shard));
    }
    for (const auto& [tensor, shard] : index.shard_of) {
        if (!found_in.contains(tensor))
            throw fail("the index maps tensor " + quoted_name(tensor) + " to shard " + quoted_name(shard) +
                       ", which does not hold it");
    }
    if (index.total_size) {
        std::uint64_t total = 0;
        for (const StoredTensor& t : out.tensors_) total += t.bytes.size();
        if (total != *index.total_size)
            throw fail("metadata.total_size is " + std::to_string(*index.total_size) + " bytes, but the shards' tensors have " +
                       std::to_string(total));
    }
    return out;
}

}  // namespace sweetspot
