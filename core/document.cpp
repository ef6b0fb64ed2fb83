#include "core/document.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include "core/files.hpp"
#include "core/limits.hpp"
#include "core/units.hpp"

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
      return items.empty() ? "an empty list" : "a list";
    case Kind::mapping:
      return entries.empty() ? "an empty mapping" : "a mapping";
    case Kind::scalar:
      break;
  }
  if (quoted && text.empty()) return "an empty text";
  return quoted ? "the text \"" + excerpt(text) + "\"" : "'" + excerpt(text) + "'";
}

// ---- text after escapes are decoded -------------------------------------------------------

namespace {

// The first control character of a decoded value or key: C0 (but line feed and tab, which a
// block scalar or a description may hold), DEL, and C1 (U+0080-U+009F, 0xC2 0x80-0x9F in
// UTF-8). Escapes ("\e", "\x07", "\0", JSON's "\u001b") make them without a control byte
// in the file, and a terminal would act on them when a message quotes the value.
std::optional<std::size_t> first_control(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) return i;
    if (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
        static_cast<unsigned char>(text[i + 1]) <= 0x9F)
      return i;
  }
  return std::nullopt;
}

// Reports a control character in `text` (a value, or a key when `key`); false when found.
bool plain_text(std::string_view text, bool key, const SourceLocation& where,
                const std::string& path, Diagnostics& diags) {
  const auto at = first_control(text);
  if (!at) return true;
  const std::size_t n = static_cast<unsigned char>(text[*at]) == 0xC2 ? 2 : 1;
  diags.error(where, path,
              std::string(key ? "a key" : "a value") + " holds the control character " +
                  excerpt(text.substr(*at, n)) + " (written as an escape such as \\e, \\x07, " +
                  "\\0 or \\u001b)",
              "scenarios and plans are plain text; remove it");
  return false;
}

}  // namespace

// ---- YAML ---------------------------------------------------------------------------------

namespace {

SourceLocation location_of(const YAML::Mark& mark, const std::string& file) {
  if (mark.is_null()) return {file, 0, 0};
  return {file, mark.line + 1, mark.column + 1};
}

// Turns yaml-cpp's tree into ours. yaml-cpp keeps an alias as a second reference to the
// anchored value, so a document can be a graph: an alias inside its own anchor is a cycle,
// and aliases of aliases grow exponentially when expanded. Both are bounded here: the depth
// (ancestors) and the number of values made (budget) are limits.
// yaml-cpp's parser refuses documents nested past 500 of its levels (YAML::DeepRecursion;
// measured: a flow list of 500 levels, a block mapping of 499). A little below, so that
// every document it refuses is reported as past the reader.
constexpr int kYamlReaderDepth = 490;

struct Expansion {
  std::int64_t budget;
  bool reported = false;
  std::vector<YAML::Node> ancestors;
};

Node convert(const YAML::Node& y, const std::string& file, Diagnostics& diags,
             const std::string& path, Expansion& ex) {
  Node n;
  n.where = location_of(y.Mark(), file);
  if (ex.reported) return n;
  if (--ex.budget < 0) {
    ex.reported = true;
    const auto limit = static_cast<double>(limits().document_nodes);
    diags.error(n.where, path,
                "the document expands to more than " + std::to_string(limits().document_nodes) +
                    " values (counting the values YAML aliases repeat: aliases of aliases grow "
                    "exponentially)",
                limit_hint("HGSIM_MAX_DOCUMENT_NODES", limit));
    return n;
  }
  if (y.IsSequence() || y.IsMap()) {
    for (const YAML::Node& a : ex.ancestors)
      if (a.is(y)) {
        ex.reported = true;
        diags.error(n.where, path, "a YAML alias refers to a value that contains it",
                    "an alias (*name) may only repeat a value defined before it, not its own "
                    "enclosing list or mapping");
        return n;
      }
    if (static_cast<int>(ex.ancestors.size()) >= limits().document_depth) {
      ex.reported = true;
      diags.error(
          n.where, path,
          "lists and mappings nest more than " + std::to_string(limits().document_depth) + " deep",
          limit_hint("HGSIM_MAX_DOCUMENT_DEPTH", limits().document_depth));
      return n;
    }
  }
  struct Ancestor {
    Expansion& ex;
    bool pushed;
    Ancestor(Expansion& e, const YAML::Node& y) : ex(e), pushed(y.IsSequence() || y.IsMap()) {
      if (pushed) ex.ancestors.push_back(y);
    }
    ~Ancestor() {
      if (pushed) ex.ancestors.pop_back();
    }
  } ancestor(ex, y);
  switch (y.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      n.kind = Node::Kind::null;
      break;
    case YAML::NodeType::Scalar:
      n.kind = Node::Kind::scalar;
      n.text = y.Scalar();
      n.quoted = y.Tag() == "!";
      if (!plain_text(n.text, false, n.where, path, diags)) ex.reported = true;
      break;
    case YAML::NodeType::Sequence: {
      n.kind = Node::Kind::sequence;
      std::size_t i = 0;
      for (const YAML::Node& item : y)
        n.items.push_back(convert(item, file, diags, index_path(path, i++), ex));
      break;
    }
    case YAML::NodeType::Map: {
      n.kind = Node::Kind::mapping;
      // Each key's first line, for the duplicate check: a hash, so that a mapping of many
      // keys is read in linear time.
      std::unordered_map<std::string, int> first_line;
      for (const auto& kv : y) {
        SourceLocation key_where = location_of(kv.first.Mark(), file);
        if (!kv.first.IsScalar()) {
          diags.error(key_where, path,
                      "a key must be a plain name, not " +
                          std::string(kv.first.IsMap() ? "a mapping" : "a list"));
          continue;
        }
        std::string key = kv.first.Scalar();
        if (!plain_text(key, true, key_where, path, diags)) {
          ex.reported = true;
          return n;
        }
        if (auto [it, fresh] = first_line.emplace(key, key_where.line); !fresh) {
          diags.error(key_where, child_path(path, key), "duplicate key '" + excerpt(key) + "'",
                      "each key may appear once in a mapping; the first is at line " +
                          std::to_string(it->second));
          continue;
        }
        n.entries.emplace_back(key, convert(kv.second, file, diags, child_path(path, key), ex));
        n.key_locations.push_back(key_where);
      }
      break;
    }
  }
  return n;
}

// Text that is not UTF-8, or holds control characters YAML and JSON do not allow, is
// refused where it starts, before a parser sees it.
bool check_text(std::string_view text, const std::string& file, Diagnostics& diags) {
  if (auto at = first_invalid_utf8(text, file)) {
    diags.error(*at, "", "the file is not UTF-8 text",
                "save it as UTF-8 (a Latin-1 'é' is one byte 0xe9; in UTF-8 it is 0xc3 0xa9)");
    return false;
  }
  int line = 1;
  int column = 1;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      ++line;
      column = 1;
      continue;
    }
    if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7F) {
      diags.error({file, line, column}, "",
                  "control character " + excerpt(std::string_view(&ch, 1)) + " in the text",
                  "scenarios and plans are plain text; remove it");
      return false;
    }
    if ((c & 0xC0) != 0x80) ++column;
  }
  return true;
}

}  // namespace

namespace {

// Where a double-quoted scalar opens that the file never closes. yaml-cpp accepts one that
// runs to the end of the file (`name: "abc` is the text "abc"), so it is found here: quotes
// that open a scalar (after the line's indentation or '-', ':', ',', '[', '{', '?'), outside
// comments, single-quoted scalars and block scalars (`|` and `>` lines and their content).
std::optional<std::pair<int, int>> unclosed_double_quote(std::string_view text) {
  int line = 1, column = 1;
  bool in_double = false, in_single = false;
  std::pair<int, int> opened{0, 0};
  char previous = '\n';       // the last character that is not a space, on this line
  int block_indent = -1;      // inside a block scalar's content: its parent's indentation
  int indent = 0;             // this line's indentation
  bool at_line_start = true;  // only spaces so far on this line
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
      column = 1;
      indent = 0;
      at_line_start = true;
      if (!in_double && !in_single) previous = '\n';
      continue;
    }
    if (at_line_start && c == ' ') {
      ++indent;
      ++column;
      continue;
    }
    if (at_line_start) {
      at_line_start = false;
      // A block scalar's content is every line indented deeper than the line that opened it.
      if (block_indent >= 0) {
        if (indent > block_indent) {
          const std::size_t end = text.find('\n', i);
          if (end == std::string_view::npos) break;
          i = end - 1;
          continue;
        }
        block_indent = -1;
      }
    }
    if (in_double) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_double = false;
    } else if (in_single) {
      if (c == '\'') {
        if (i + 1 < text.size() && text[i + 1] == '\'')
          ++i;
        else
          in_single = false;
      }
    } else if (c == '#' &&
               (previous == '\n' || (i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t')))) {
      const std::size_t end = text.find('\n', i);
      if (end == std::string_view::npos) break;
      i = end - 1;
      continue;
    } else if ((c == '"' || c == '\'') &&
               std::string_view("\n-:,[{?").find(previous) != std::string_view::npos) {
      (c == '"' ? in_double : in_single) = true;
      if (c == '"') opened = {line, column};
    } else if ((c == '|' || c == '>') && (previous == ':' || previous == '-')) {
      block_indent = indent;  // the rest of this line is indicators and a comment
      const std::size_t end = text.find('\n', i);
      if (end == std::string_view::npos) break;
      i = end - 1;
      continue;
    }
    if (c != ' ' && c != '\t') previous = c;
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++column;
  }
  if (in_double) return opened;
  return std::nullopt;
}

// In a flow mapping (`{wan[*].bandwidth: ...}`) YAML reads `[*]` as a list holding an
// alias, so a sweep path written there fails as "alias not found": say how to write it.
std::string star_in_flow_hint(std::string_view text, const YAML::Exception& e) {
  if (e.msg.find("alias") == std::string::npos || e.mark.line < 0) return {};
  std::size_t start = 0;
  for (int line = 0; line < e.mark.line && start != std::string_view::npos; ++line) {
    start = text.find('\n', start);
    if (start != std::string_view::npos) ++start;
  }
  if (start == std::string_view::npos) return {};
  const std::string_view line = text.substr(start, text.find('\n', start) - start);
  if (line.find("[*]") == std::string_view::npos) return {};
  return "inside { } a key with [*] must be quoted (\"wan[*].bandwidth\": [1Gbps, 10Gbps]); "
         "or write the mapping in block style, one key a line";
}

}  // namespace

std::optional<Node> parse_yaml(std::string_view text, const std::string& file, Diagnostics& diags) {
  if (!check_text(text, file, diags)) return std::nullopt;
  if (auto at = unclosed_double_quote(text)) {
    diags.error({file, at->first, at->second}, "",
                "a double-quoted text opens here and is never closed",
                "end it with a '\"' on its line");
    return std::nullopt;
  }
  try {
    std::vector<YAML::Node> documents = YAML::LoadAll(std::string(text));
    if (documents.size() > 1) {
      diags.error(location_of(documents[1].Mark(), file), "",
                  "a second YAML document (after '---'); hgsim reads one document a file",
                  "put each scenario in its own file, or remove the '---' line");
      return std::nullopt;
    }
    const YAML::Node root = documents.empty() ? YAML::Node() : documents.front();
    Expansion ex{limits().document_nodes, false, {}};
    Node n = convert(root, file, diags, "", ex);
    if (ex.reported) return std::nullopt;
    if (n.is_null()) n.where = {file, 1, 1};
    return n;
  } catch (const YAML::DeepRecursion& e) {
    // yaml-cpp stops at its own depth and says only "bad file". Below it, the same message
    // as a document our depth check sees whole; past it, raising our limit would not help.
    const int depth = limits().document_depth;
    if (depth < kYamlReaderDepth)
      diags.error(location_of(e.mark, file), "",
                  "lists and mappings nest more than " + std::to_string(depth) + " deep",
                  limit_hint("HGSIM_MAX_DOCUMENT_DEPTH", depth));
    else
      diags.error(location_of(e.mark, file), "",
                  "lists and mappings nest deeper than the YAML reader goes (yaml-cpp stops "
                  "at about 500 levels)",
                  "write the document as JSON, which may nest up to HGSIM_MAX_DOCUMENT_DEPTH (" +
                      std::to_string(depth) + ")");
    return std::nullopt;
  } catch (const YAML::Exception& e) {
    diags.error(location_of(e.mark, file), "", "not valid YAML: " + e.msg,
                star_in_flow_hint(text, e));
    return std::nullopt;
  }
}

std::optional<Node> load_yaml_file(const std::string& path, Diagnostics& diags) {
  auto text = read_input_file(path, "file", diags);
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

namespace {

SourceLocation position_of(std::string_view text, std::size_t offset, const std::string& file) {
  int line = 1;
  int column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      ++column;
    }
  }
  return {file, line, column};
}

// The first bracket that nests deeper than the limit, found without parsing (strings are
// skipped), so that no recursive code ever sees a deeper document.
std::optional<std::size_t> too_deep(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

// Builds our tree straight from nlohmann's parser events (no intermediate json value):
// numbers keep the text they were written with, duplicate keys are reported.
class JsonBuilder : public nlohmann::json_sax<Json> {
 public:
  JsonBuilder(std::string_view text, const std::string& file, Diagnostics& diags)
      : text_(text), file_(file), diags_(diags) {}

  std::optional<Node> root;

  bool null() override { return add(Node{}); }
  bool boolean(bool v) override { return add(scalar(v ? "true" : "false", false)); }
  bool number_integer(number_integer_t v) override { return add(scalar(std::to_string(v), false)); }
  bool number_unsigned(number_unsigned_t v) override {
    return add(scalar(std::to_string(v), false));
  }
  bool number_float(number_float_t, const string_t& written) override {
    return add(scalar(written, false));
  }
  bool string(string_t& v) override {
    return plain_text(v, false, {file_, 0, 0}, next_path(), diags_) && add(scalar(v, true));
  }
  bool binary(binary_t&) override { return add(Node{}); }
  bool start_object(std::size_t) override { return open(Node::Kind::mapping); }
  bool key(string_t& k) override {
    Frame& f = stack_.back();
    if (!plain_text(k, true, {file_, 0, 0}, f.path, diags_)) return false;
    f.duplicate = !f.keys.insert(k).second;
    if (f.duplicate)
      diags_.error({file_, 0, 0}, child_path(f.path, k), "duplicate key '" + excerpt(k) + "'",
                   "each key may appear once in an object");
    f.key = k;
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(Node::Kind::sequence); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 3: syntax error ..."
    if (auto colon = what.find(": "); colon != std::string::npos) what = what.substr(colon + 2);
    diags_.error(position_of(text_, position == 0 ? 0 : position - 1, file_), "",
                 "not valid JSON: " + what);
    return false;
  }

 private:
  struct Frame {
    Node node;
    std::string path;
    std::string key;
    std::unordered_set<std::string> keys;  // of a mapping: the duplicate check in linear time
    bool duplicate = false;                // the value being read is a duplicate key's
  };

  Node scalar(std::string text, bool quoted) const {
    Node n;
    n.kind = Node::Kind::scalar;
    n.text = std::move(text);
    n.quoted = quoted;
    n.where = {file_, 0, 0};
    return n;
  }
  std::string next_path() const {
    if (stack_.empty()) return "";
    const Frame& f = stack_.back();
    return f.node.is_mapping() ? child_path(f.path, f.key)
                               : index_path(f.path, f.node.items.size());
  }
  bool count() {
    if (++values_ <= limits().document_nodes) return true;
    const auto limit = static_cast<double>(limits().document_nodes);
    diags_.error(
        {file_, 0, 0}, next_path(),
        "the document has more than " + std::to_string(limits().document_nodes) + " values",
        limit_hint("HGSIM_MAX_DOCUMENT_NODES", limit));
    return false;
  }
  bool add(Node n) {
    if (!count()) return false;
    n.where = {file_, 0, 0};
    if (stack_.empty()) {
      root = std::move(n);
      return true;
    }
    Frame& f = stack_.back();
    if (f.node.is_mapping()) {
      if (f.duplicate) return true;  // reported; the first is kept
      f.node.entries.emplace_back(f.key, std::move(n));
      f.node.key_locations.push_back({file_, 0, 0});
    } else {
      f.node.items.push_back(std::move(n));
    }
    return true;
  }
  bool open(Node::Kind kind) {
    if (!count()) return false;
    Frame f;
    f.path = next_path();
    f.node.kind = kind;
    f.node.where = {file_, 0, 0};
    stack_.push_back(std::move(f));
    return true;
  }
  bool close() {
    Node n = std::move(stack_.back().node);
    stack_.pop_back();
    --values_;  // counted when opened
    return add(std::move(n));
  }

  std::string_view text_;
  const std::string& file_;
  Diagnostics& diags_;
  std::vector<Frame> stack_;
  std::int64_t values_ = 0;
};

}  // namespace

std::optional<Node> parse_json(std::string_view text, const std::string& file, Diagnostics& diags) {
  if (!check_text(text, file, diags)) return std::nullopt;
  const int depth = limits().document_depth;
  if (auto at = too_deep(text, depth)) {
    diags.error(position_of(text, *at, file), "",
                "lists and objects nest more than " + std::to_string(depth) + " deep",
                limit_hint("HGSIM_MAX_DOCUMENT_DEPTH", depth));
    return std::nullopt;
  }
  JsonBuilder builder(text, file, diags);
  const int errors_before = diags.error_count();
  const bool ok = Json::sax_parse(text, &builder);
  if (!ok || !builder.root || diags.error_count() > errors_before) return std::nullopt;
  return std::move(builder.root);
}

std::optional<Node> load_json_file(const std::string& path, Diagnostics& diags) {
  auto text = read_input_file(path, "file", diags);
  if (!text) return std::nullopt;
  return parse_json(*text, path, diags);
}

std::optional<Node> load_document(const std::string& path, Diagnostics& diags) {
  bool json = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  return json ? load_json_file(path, diags) : load_yaml_file(path, diags);
}

void record_locations(const Node& n, const std::string& path,
                      std::map<std::string, SourceLocation>& out) {
  out[path] = n.where;
  for (std::size_t i = 0; i < n.items.size(); ++i)
    record_locations(n.items[i], index_path(path, i), out);
  for (const auto& [key, value] : n.entries) record_locations(value, child_path(path, key), out);
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
    diags_.error(node_.key_locations[i], child_path(path_, key),
                 "unknown key '" + excerpt(key) + "'", did_you_mean(key, accepted));
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

std::optional<std::string> as_name(const Node& n, const std::string& path, Diagnostics& d) {
  if (!expect_scalar(n, path, d, "a name")) return std::nullopt;
  if (n.text.empty()) {
    d.error(n.where, path, "a name may not be empty");
    return std::nullopt;
  }
  if (const std::size_t length = utf8_length(n.text); length > 200) {
    d.error(n.where, path, "a name of " + std::to_string(length) + " characters",
            "names are at most 200 characters");
    return std::nullopt;
  }
  return n.text;
}

std::optional<std::string> as_cluster_name(const Node& n, const std::string& path, Diagnostics& d) {
  auto name = as_name(n, path, d);
  if (!name) return std::nullopt;
  auto plain = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  const bool ok = name->size() <= 64 && plain(name->front()) &&
                  std::all_of(name->begin(), name->end(),
                              [&](char c) { return plain(c) || c == '-' || c == '_' || c == '.'; });
  if (!ok) {
    d.error(n.where, path, "cluster name " + n.describe() + " has characters hgsim cannot use",
            "use letters, digits, '-', '_' and '.' (starting with a letter or digit, at most 64): "
            "the simulator names hosts and links after the cluster ('east/n0', 'wan:a->b')");
    return std::nullopt;
  }
  return name;
}

std::optional<long long> as_integer(const Node& n, const std::string& path, Diagnostics& d) {
  if (!expect_scalar(n, path, d, "a whole number")) return std::nullopt;
  long long value = 0;
  const std::string& t = n.text;
  const char* begin = t.data() + (!t.empty() && t[0] == '+' ? 1 : 0);
  auto [p, ec] = std::from_chars(begin, t.data() + t.size(), value);
  if (!n.quoted && ec == std::errc::result_out_of_range) {
    d.error(n.where, path, "the number " + n.describe() + " is too large",
            "a whole number here is at most " + std::to_string(std::numeric_limits<int>::max()));
    return std::nullopt;
  }
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
    d.error(n.where, path, "must be at least 1, found " + excerpt(n.text));
    return std::nullopt;
  }
  if (*v > std::numeric_limits<int>::max()) {
    d.error(n.where, path, "the number " + n.describe() + " is too large",
            "a count here is at most " + std::to_string(std::numeric_limits<int>::max()));
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
  if (!n.quoted && ec == std::errc::result_out_of_range) {
    d.error(n.where, path, "the number " + n.describe() + " is out of range for a double",
            "write a number between 1e-300 and 1e300 in size");
    return std::nullopt;
  }
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
  d.error(n.where, path, "unknown " + std::string(what) + " '" + excerpt(n.text) + "'",
          did_you_mean(n.text, names));
  return std::nullopt;
}

}  // namespace hgsim::core
