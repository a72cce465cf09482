#pragma once
// A checkpoint's config.json, one field at a time: each read checks the field's type and range and
// fails with a CheckpointError naming the file and the field. Absent and null fields take the
// caller's default, as transformers' configs do.
#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "base/strict_json.hpp"
#include "kernels/model/checkpoint_error.hpp"

namespace sweetspot {

// "key", quoted as in the file. Built by appending: GCC 12 warns (falsely) on literal + temporary.
inline std::string config_field(const char* key) {
    std::string s = "\"";
    s += key;
    s += '"';
    return s;
}

// The fields of config.json, each checked for its type and range.
class ConfigReader {
public:
    ConfigReader(const nlohmann::json& config, const std::string& label) : config_(config), label_(label) {}

    const std::string& label() const { return label_; }

    [[noreturn]] void fail(const std::string& message) const { throw CheckpointError(label_ + ": " + message); }

    const nlohmann::json* find(const char* key) const {
        const auto it = config_.find(key);
        return it == config_.end() || it->is_null() ? nullptr : &*it;
    }

    int integer(const char* key, int fallback, std::int64_t max) const {
        const nlohmann::json* v = find(key);
        if (v == nullptr) return fallback;
        if (!v->is_number_integer()) fail(config_field(key) + " must be an integer, got " + json_excerpt(*v));
        const auto n = v->get<std::int64_t>();
        if (n < 1 || n > max)
            fail(config_field(key) + " = " + std::to_string(n) + " is out of range (1 to " + std::to_string(max) + ")");
        return static_cast<int>(n);
    }

    bool boolean(const char* key, bool fallback) const {
        const nlohmann::json* v = find(key);
        if (v == nullptr) return fallback;
        if (!v->is_boolean()) fail(config_field(key) + " must be true or false, got " + json_excerpt(*v));
        return v->get<bool>();
    }

    std::string string(const char* key, const std::string& fallback) const {
        const nlohmann::json* v = find(key);
        if (v == nullptr) return fallback;
        if (!v->is_string()) fail(config_field(key) + " must be a string, got " + json_excerpt(*v));
        return v->get<std::string>();
    }

    double positive_real(const char* key, double fallback) const {
        const nlohmann::json* v = find(key);
        if (v == nullptr) return fallback;
        if (!v->is_number()) fail(config_field(key) + " must be a number, got " + json_excerpt(*v));
        const auto x = v->get<double>();
        if (!(std::isfinite(x) && x > 0.0)) fail(config_field(key) + " must be a positive number, got " + json_excerpt(*v));
        return x;
    }

    float positive_number(const char* key, float fallback) const {
        const auto x = static_cast<float>(positive_real(key, fallback));
        if (!(std::isfinite(x) && x > 0.0f))
            fail(config_field(key) + " must be a positive number within fp32's range, got " + json_excerpt(*find(key)));
        return x;
    }

private:
    const nlohmann::json& config_;
    const std::string& label_;
};

}  // namespace sweetspot
