// A parsed input document (YAML or JSON) as a tree that remembers where each value was.
//
// Scenario and Plan parsing reads this tree, never yaml-cpp or nlohmann::json directly,
// so one validator serves YAML files, JSON plan files and JSON round trips, and every
// error can name `file:line:column` (YAML) or at least the key path (JSON).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/diagnostics.hpp"
#include "core/text.hpp"

namespace hgsim::core {

// JSON with keys in insertion order, so output reads in the scenario language's order.
using Json = nlohmann::ordered_json;

struct Node {
  enum class Kind { null, scalar, sequence, mapping };
  Kind kind = Kind::null;
  std::string text;         // scalar text as written
  bool quoted = false;      // scalar was a quoted string ("8" is text, 8 is a number)
  std::vector<Node> items;  // sequence items
  std::vector<std::pair<std::string, Node>> entries;  // mapping entries in file order
  std::vector<SourceLocation> key_locations;          // where each mapping key is
  SourceLocation where;

  bool is_null() const { return kind == Kind::null; }
  bool is_scalar() const { return kind == Kind::scalar; }
  bool is_sequence() const { return kind == Kind::sequence; }
  bool is_mapping() const { return kind == Kind::mapping; }
  const Node* find(std::string_view key) const;
  Node* find(std::string_view key);
  // "a mapping", "a sequence", "the number 3", "the text 'abc'", "nothing"
  std::string describe() const;
};

// Parses YAML text; syntax errors and duplicate keys go to `diags` with their position.
// Refused with their position too: text that is not UTF-8, a second document, aliases
// that refer to their own anchor or expand past limits().document_nodes, nesting deeper
// than limits().document_depth.
// `file` is used in locations only. Returns nullopt when the text is not YAML at all.
std::optional<Node> parse_yaml(std::string_view text, const std::string& file, Diagnostics& diags);
std::optional<Node> load_yaml_file(const std::string& path, Diagnostics& diags);

// JSON: values have no positions; keys paths still identify them. parse_json refuses, with
// the line and column, syntax errors, text that is not UTF-8, nesting deeper than
// limits().document_depth (checked before anything is built) and duplicate keys; numbers
// keep their spelling ("1e400" stays that text, and is then refused as out of range).
Node from_json(const Json& value, const std::string& file = {});
std::optional<Node> parse_json(std::string_view text, const std::string& file, Diagnostics& diags);
std::optional<Node> load_json_file(const std::string& path, Diagnostics& diags);
// Loads by extension: .json as JSON, anything else as YAML (YAML is a superset of JSON).
std::optional<Node> load_document(const std::string& path, Diagnostics& diags);

Json to_json(const Node& node);

// Where every value of `n` was written, by key path under `path` ("clusters[1].gpu").
void record_locations(const Node& n, const std::string& path,
                      std::map<std::string, SourceLocation>& out);

// Reads a mapping field by field, remembering which keys were used, so that the keys
// nobody asked for can be reported with a did-you-mean. All `get_*` functions report
// problems into the Diagnostics and return nullopt; none of them throws.
class Fields {
 public:
  // `node` must outlive this object. If it is not a mapping, that is reported once.
  Fields(const Node& node, std::string path, Diagnostics& diags);

  const Node* required(std::string_view key);  // reports a missing key
  const Node* optional(std::string_view key) const;
  bool has(std::string_view key) const { return optional(key) != nullptr; }

  // Reports every key that was not read (unknown keys) with a did-you-mean from the
  // keys this mapping accepts. Call after reading all fields.
  void reject_unknown(std::vector<std::string> accepted = {});

  std::string path_of(std::string_view key) const;
  const std::string& path() const { return path_; }
  const Node& node() const { return node_; }
  bool ok() const { return node_.is_mapping(); }

 private:
  const Node& node_;
  std::string path_;
  Diagnostics& diags_;
  mutable std::vector<std::string> asked_;
};

std::string child_path(const std::string& parent, std::string_view key);
std::string index_path(const std::string& parent, std::size_t index);

// Scalar conversions. Each reports "expected X, found Y" at the node's location.
std::optional<std::string> as_string(const Node& n, const std::string& path, Diagnostics& d);
// A name (scenario, model, GPU): non-empty text of at most 200 characters.
std::optional<std::string> as_name(const Node& n, const std::string& path, Diagnostics& d);
// A cluster name: letters, digits, '-', '_' and '.', starting with a letter or digit, at
// most 64 characters. The simulator builds zone, host and link names from it ("east/n0",
// "wan:east->west"), so '/', ':' and '>' could make two of them collide.
std::optional<std::string> as_cluster_name(const Node& n, const std::string& path, Diagnostics& d);
std::optional<long long> as_integer(const Node& n, const std::string& path, Diagnostics& d);
// An integer >= 1 (counts: nodes, layers, replicas, ...).
std::optional<int> as_positive_count(const Node& n, const std::string& path, Diagnostics& d);
std::optional<double> as_number(const Node& n, const std::string& path, Diagnostics& d);
std::optional<bool> as_bool(const Node& n, const std::string& path, Diagnostics& d);

// Picks one of `names` (case-sensitive, as written in docs); reports a did-you-mean.
std::optional<std::string> as_choice(const Node& n, const std::string& path, Diagnostics& d,
                                     const std::vector<std::string>& names, std::string_view what);

}  // namespace hgsim::core
