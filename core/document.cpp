#include "core/document.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace hgsim::core {

// ---- Node --------------------------------------------------------------------------------

const Node* Node::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

Node* Node::find(std::string_view key) {
  for (auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

std::string Node::describe() const {
  switch (kind) {
    case Kind::null:
      return "nothing";
    case Kind::sequence:
      return "a list";
    case Kind::mapping:
      return "a mapping";
    case Kind::scalar:
      break;
  }
  return quoted ? "the text \"" + text + "\"" : "'" + text + "'";
}

// ---- YAML ---------------------------------------------------------------------------------

namespace {

SourceLocation location_of(const YAML::Mark& mark, const std::string& file) {
  if (mark.is_null()) return {file, 0, 0};
  return {file, mark.line + 1, mark.column + 1};
}

const SourceLocation* key_location(const Node& mapping, const std::string& key) {
  for (std::size_t i = 0; i < mapping.entries.size(); ++i)
    if (mapping.entries[i].first == key) return &mapping.key_locations[i];
  return nullptr;
}

Node convert(const YAML::Node& y, const std::string& file, Diagnostics& diags,
             const std::string& path) {
  Node n;
  n.where = location_of(y.Mark(), file);
  switch (y.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      n.kind = Node::Kind::null;
      break;
    case YAML::NodeType::Scalar:
      n.kind = Node::Kind::scalar;
      n.text = y.Scalar();
      n.quoted = y.Tag() == "!";
      break;
    case YAML::NodeType::Sequence: {
      n.kind = Node::Kind::sequence;
      std::size_t i = 0;
      for (const YAML::Node& item : y)
        n.items.push_back(convert(item, file, diags, index_path(path, i++)));
      break;
    }
    case YAML::NodeType::Map: {
      n.kind = Node::Kind::mapping;
      for (const auto& kv : y) {
        SourceLocation key_where = location_of(kv.first.Mark(), file);
        if (!kv.first.IsScalar()) {
          diags.error(key_where, path,
                      "a key must be a plain name, not " +
                          std::string(kv.first.IsMap() ? "a mapping" : "a list"));
          continue;
        }
        std::string key = kv.first.Scalar();
        if (const SourceLocation* first = key_location(n, key)) {
          diags.error(key_where, child_path(path, key), "duplicate key '" + key + "'",
                      "each key may appear once in a mapping; the first is at line " +
                          std::to_string(first->line));
          continue;
        }
        n.entries.emplace_back(key, convert(kv.second, file, diags, child_path(path, key)));
        n.key_locations.push_back(key_where);
      }
      break;
    }
  }
  return n;
}

std::optional<std::string> read_file(const std::string& path, Diagnostics& diags) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    diags.error({path, 0, 0}, "", "cannot open file: " + std::string(std::strerror(errno)));
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<Node> parse_yaml(std::string_view text, const std::string& file, Diagnostics& diags) {
  try {
    YAML::Node root = YAML::Load(std::string(text));
    Node n = convert(root, file, diags, "");
    if (n.is_null()) n.where = {file, 1, 1};
    return n;
  } catch (const YAML::Exception& e) {
    diags.error(location_of(e.mark, file), "", "not valid YAML: " + e.msg);
    return std::nullopt;
  }
}

std::optional<Node> load_yaml_file(const std::string& path, Diagnostics& diags) {
  auto text = read_file(path, diags);
  if (!text) return std::nullopt;
  return parse_yaml(*text, path, diags);
}

// ---- JSON ---------------------------------------------------------------------------------

Node from_json(const Json& value, const std::string& file) {
  Node n;
  n.where = {file, 0, 0};
  switch (value.type()) {
    case Json::value_t::null:
    case Json::value_t::discarded:
      n.kind = Node::Kind::null;
      break;
    case Json::value_t::object:
      n.kind = Node::Kind::mapping;
      for (const auto& [key, v] : value.items()) {
        n.entries.emplace_back(key, from_json(v, file));
        n.key_locations.push_back({file, 0, 0});
      }
      break;
    case Json::value_t::array:
      n.kind = Node::Kind::sequence;
      for (const auto& v : value) n.items.push_back(from_json(v, file));
      break;
    case Json::value_t::string:
      n.kind = Node::Kind::scalar;
      n.text = value.get<std::string>();
      n.quoted = true;
      break;
    default:  // numbers and booleans keep their JSON spelling
      n.kind = Node::Kind::scalar;
      n.text = value.dump();
      break;
  }
  return n;
}

std::optional<Node> parse_json(std::string_view text, const std::string& file, Diagnostics& diags) {
  try {
    // ordered_json keeps the file's key order, so "unknown key" reports read in order.
    return from_json(Json::parse(text), file);
  } catch (const nlohmann::json::parse_error& e) {
    diags.error({file, 0, 0}, "", std::string("not valid JSON: ") + e.what());
    return std::nullopt;
  }
}

std::optional<Node> load_json_file(const std::string& path, Diagnostics& diags) {
  auto text = read_file(path, diags);
  if (!text) return std::nullopt;
  return parse_json(*text, path, diags);
}

std::optional<Node> load_document(const std::string& path, Diagnostics& diags) {
  bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  return json ? load_json_file(path, diags) : load_yaml_file(path, diags);
}

Json to_json(const Node& node) {
  switch (node.kind) {
    case Node::Kind::null:
      return nullptr;
    case Node::Kind::sequence: {
      auto out = Json::array();
      for (const Node& item : node.items) out.push_back(to_json(item));
      return out;
    }
    case Node::Kind::mapping: {
      auto out = Json::object();
      for (const auto& [k, v] : node.entries) out[k] = to_json(v);
      return out;
    }
    case Node::Kind::scalar:
      break;
  }
  if (node.quoted) return node.text;
  if (node.text == "true" || node.text == "false") return node.text == "true";
  long long integer = 0;
  auto [p, ec] = std::from_chars(node.text.data(), node.text.data() + node.text.size(), integer);
  if (ec == std::errc() && p == node.text.data() + node.text.size()) return integer;
  double number = 0;
  auto [q, ec2] = std::from_chars(node.text.data(), node.text.data() + node.text.size(), number);
  if (ec2 == std::errc() && q == node.text.data() + node.text.size() && std::isfinite(number))
    return number;
  return node.text;
}

// ---- paths --------------------------------------------------------------------------------

std::string child_path(const std::string& parent, std::string_view key) {
  return parent.empty() ? std::string(key) : parent + "." + std::string(key);
}

std::string index_path(const std::string& parent, std::size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

// ---- Fields -------------------------------------------------------------------------------

Fields::Fields(const Node& node, std::string path, Diagnostics& diags)
    : node_(node), path_(std::move(path)), diags_(diags) {
  if (!node_.is_mapping())
    diags_.error(node_.where, path_,
                 "expected a mapping (key: value lines), found " + node_.describe());
}

const Node* Fields::optional(std::string_view key) const {
  asked_.emplace_back(key);
  if (!node_.is_mapping()) return nullptr;
  const Node* n = node_.find(key);
  return (n != nullptr && !n->is_null()) ? n : nullptr;
}

const Node* Fields::required(std::string_view key) {
  const Node* n = optional(key);
  if (n == nullptr && node_.is_mapping()) {
    const Node* present = node_.find(key);
    std::string why = present ? "'" + std::string(key) + "' has no value"
                              : "missing key '" + std::string(key) + "'";
    diags_.error(present ? present->where : node_.where, child_path(path_, key), why);
  }
  return n;
}

void Fields::reject_unknown(std::vector<std::string> accepted) {
  if (!node_.is_mapping()) return;
  for (const std::string& k : asked_)
    if (std::find(accepted.begin(), accepted.end(), k) == accepted.end()) accepted.push_back(k);
  for (std::size_t i = 0; i < node_.entries.size(); ++i) {
    const std::string& key = node_.entries[i].first;
    if (std::find(accepted.begin(), accepted.end(), key) != accepted.end()) continue;
    diags_.error(node_.key_locations[i], child_path(path_, key), "unknown key '" + key + "'",
                 did_you_mean(key, accepted));
  }
}

std::string Fields::path_of(std::string_view key) const {
  return child_path(path_, key);
}

// ---- scalar conversions -------------------------------------------------------------------

namespace {

bool expect_scalar(const Node& n, const std::string& path, Diagnostics& d, std::string_view what) {
  if (n.is_scalar()) return true;
  d.error(n.where, path, "expected " + std::string(what) + ", found " + n.describe());
  return false;
}

}  // namespace

std::optional<std::string> as_string(const Node& n, const std::string& path, Diagnostics& d) {
  if (!expect_scalar(n, path, d, "a name")) return std::nullopt;
  return n.text;
}

std::optional<long long> as_integer(const Node& n, const std::string& path, Diagnostics& d) {
  if (!expect_scalar(n, path, d, "a whole number")) return std::nullopt;
  long long value = 0;
  const std::string& t = n.text;
  const char* begin = t.data() + (!t.empty() && t[0] == '+' ? 1 : 0);
  auto [p, ec] = std::from_chars(begin, t.data() + t.size(), value);
  if (n.quoted || t.empty() || ec != std::errc() || p != t.data() + t.size()) {
    d.error(n.where, path, "expected a whole number, found " + n.describe());
    return std::nullopt;
  }
  return value;
}

std::optional<int> as_positive_count(const Node& n, const std::string& path, Diagnostics& d) {
  auto v = as_integer(n, path, d);
  if (!v) return std::nullopt;
  if (*v < 1) {
    d.error(n.where, path, "must be at least 1, found " + n.text);
    return std::nullopt;
  }
  if (*v > std::numeric_limits<int>::max()) {
    d.error(n.where, path, "is too large: " + n.text);
    return std::nullopt;
  }
  return static_cast<int>(*v);
}

std::optional<double> as_number(const Node& n, const std::string& path, Diagnostics& d) {
  if (!expect_scalar(n, path, d, "a number")) return std::nullopt;
  double value = 0;
  const std::string& t = n.text;
  const char* begin = t.data() + (!t.empty() && t[0] == '+' ? 1 : 0);
  auto [p, ec] = std::from_chars(begin, t.data() + t.size(), value);
  if (n.quoted || t.empty() || ec != std::errc() || p != t.data() + t.size() ||
      !std::isfinite(value)) {
    d.error(n.where, path, "expected a number, found " + n.describe());
    return std::nullopt;
  }
  return value;
}

std::optional<bool> as_bool(const Node& n, const std::string& path, Diagnostics& d) {
  if (!expect_scalar(n, path, d, "true or false")) return std::nullopt;
  if (!n.quoted && n.text == "true") return true;
  if (!n.quoted && n.text == "false") return false;
  d.error(n.where, path, "expected true or false, found " + n.describe());
  return std::nullopt;
}

std::optional<std::string> as_choice(const Node& n, const std::string& path, Diagnostics& d,
                                     const std::vector<std::string>& names, std::string_view what) {
  if (!n.is_scalar()) {
    d.error(n.where, path, "expected " + std::string(what) + ", found " + n.describe(),
            did_you_mean("", names));
    return std::nullopt;
  }
  if (std::find(names.begin(), names.end(), n.text) != names.end()) return n.text;
  d.error(n.where, path, "unknown " + std::string(what) + " '" + n.text + "'",
          did_you_mean(n.text, names));
  return std::nullopt;
}

}  // namespace hgsim::core
