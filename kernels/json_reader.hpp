// Reading a measured-profile JSON file field by field: every problem throws `Error` with
// the file and the JSON path ("x.json: entries[3].median_s: expected a positive number").
// Shared by the op profiles (profile.hpp) and the layer profiles (layer_profile.hpp).
#pragma once

#include <cmath>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

namespace hgsim::kernels {

template <class Error>
class JsonReader {
 public:
  using Json = nlohmann::ordered_json;

  explicit JsonReader(std::string file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const std::string& path, const std::string& message) const {
    throw Error(file_ + ": " + (path.empty() ? "" : path + ": ") + message);
  }
  const Json& member(const Json& object, const std::string& path, const char* key) const {
    if (!object.contains(key)) fail(path, std::string("missing key '") + key + "'");
    return object.at(key);
  }
  std::string string(const Json& object, const std::string& path, const char* key) const {
    const Json& v = member(object, path, key);
    if (!v.is_string()) fail(join(path, key), "expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  double number(const Json& object, const std::string& path, const char* key, bool positive) const {
    const Json& v = member(object, path, key);
    if (!v.is_number()) fail(join(path, key), "expected a number, got " + v.dump());
    const double x = v.get<double>();
    if (!std::isfinite(x) || x < 0 || (positive && x == 0))
      fail(join(path, key), std::string("expected a ") + (positive ? "positive" : "non-negative") +
                                " number, got " + v.dump());
    return x;
  }
  // A whole number >= 1 (counts: sequences, tp, ...).
  int count(const Json& object, const std::string& path, const char* key) const {
    const double x = number(object, path, key, true);
    if (x != std::floor(x) || x > 1e9)
      fail(join(path, key), "expected a whole number, got " + object.at(key).dump());
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
