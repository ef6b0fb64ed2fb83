// Reading a measured-profile JSON file field by field: every problem throws `Error` with
// the file and the JSON path ("x.json: entries[3].median_s: expected a positive number").
// Shared by the op profiles (profile.hpp) and the layer profiles (layer_profile.hpp).
#pragma once

#include <cmath>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/document.hpp"

namespace hgsim::kernels {

template <class Error>
class JsonReader {
 public:
  using Json = nlohmann::ordered_json;

  explicit JsonReader(std::string file) : file_(std::move(file)) {}

  // Messages quote at most 60 characters of the file (core::excerpt), control characters
  // escaped: `path` may hold a key of the file.
  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    throw Error(file_ + ": " + (path.empty() ? "" : path + ": ") + message);
  }
  static std::string quote(const Json& v) { return core::excerpt(v.dump()); }
  const Json& member(const Json& object, const std::string& path, const char* key) const {
    if (!object.contains(key)) fail(path, std::string("missing key '") + key + "'");
    return object.at(key);
  }
  std::string string(const Json& object, const std::string& path, const char* key) const {
    const Json& v = member(object, path, key);
    if (!v.is_string()) fail(join(path, key), "expected a string, got " + quote(v));
    std::string text = v.get<std::string>();
    // Names and labels end up in messages and tables: no control characters, bounded.
    for (char c : text)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7F)
        fail(join(path, key), "a control character in " + quote(v));
    if (const std::size_t length = core::utf8_length(text); length > 4096)
      fail(join(path, key),
           "a text of " + std::to_string(length) + " characters; at most 4096: " + quote(v));
    return text;
  }
  double number(const Json& object, const std::string& path, const char* key, bool positive) const {
    const Json& v = member(object, path, key);
    if (!v.is_number()) fail(join(path, key), "expected a number, got " + quote(v));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < 0 || (positive && x == 0))
      fail(join(path, key), std::string("expected a ") + (positive ? "positive" : "non-negative") +
                                " number, got " + quote(v));
    return x;
  }
  // A measured time: positive and at most an hour (one kernel, layer or optimizer step that
  // takes longer is a slip of the exponent, and would make an iteration last centuries).
  double seconds(const Json& object, const std::string& path, const char* key,
                 bool positive = true) const {
    const double x = number(object, path, key, positive);
    if (x > 3600)
      fail(join(path, key), "a measured time of at most 3600 s, got " + quote(object.at(key)));
    return x;
  }
  // A whole number >= 1 (counts: sequences, tp, ...).
  int count(const Json& object, const std::string& path, const char* key) const {
    const double x = number(object, path, key, true);
    if (x != std::floor(x) || x > 1e9)
      fail(join(path, key), "expected a whole number, got " + quote(object.at(key)));
    return static_cast<int>(x);
  }
  static std::string join(const std::string& path, const std::string& key) {
    return path.empty() ? key : path + "." + key;
  }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

}  // namespace hgsim::kernels
