#include "base/strict_json.hpp"

#include <set>
#include <vector>

#include "kernels/model/checkpoint_error.hpp"

namespace sweetspot {
namespace {

// Raised inside the parser's callback; carries the reason out of nlohmann's parse.
struct Refused {
    std::string reason;
};

// nlohmann's message without its "[json.exception.parse_error.101] " tag, which means nothing to a user.
std::string_view without_tag(std::string_view what) {
    if (const auto end = what.find("] "); what.starts_with("[json.exception.") && end != std::string_view::npos)
        what.remove_prefix(end + 2);
    return what;
}

}  // namespace

nlohmann::json parse_strict_json(std::string_view text, const std::string& label, const std::string& what) {
    using nlohmann::json;
    // nlohmann's lexer takes a NUL byte for the end of the input and would leave whatever follows
    // unread; JSON text never holds a raw one.
    if (const auto nul = text.find('\0'); nul != std::string_view::npos)
        throw CheckpointError(label + ": " + what + " is not valid JSON: a NUL byte at offset " + std::to_string(nul));
    // The keys seen so far in each object that is still open, innermost last.
    std::vector<std::set<std::string>> open_objects;
    const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
        if (depth > kMaxJsonDepth) throw Refused{"nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
        switch (event) {
            case json::parse_event_t::object_start: open_objects.emplace_back(); break;
            case json::parse_event_t::object_end: open_objects.pop_back(); break;
            case json::parse_event_t::key: {
                const auto& key = parsed.get_ref<const std::string&>();
                if (!open_objects.back().insert(key).second) throw Refused{"duplicate key \"" + key + "\""};
                break;
            }
            default: break;
        }
        return true;
    };
    try {
        return json::parse(text.begin(), text.end(), check);
    } catch (const Refused& e) {
        throw CheckpointError(label + ": " + what + " is not valid JSON: " + e.reason);
    } catch (const json::exception& e) {
        throw CheckpointError(label + ": " + what + " is not valid JSON: " + std::string(without_tag(e.what())));
    }
}

std::string json_excerpt(const nlohmann::json& value) {
    constexpr std::size_t kMaxShown = 40;
    std::string s = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return s.size() <= kMaxShown ? s : s.substr(0, kMaxShown) + "...";
}

}  // namespace sweetspot
