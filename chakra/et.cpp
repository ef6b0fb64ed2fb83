#include "chakra/et.hpp"

#include <sys/stat.h>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

namespace hgsim::chakra {

namespace {

// AttributeProto's oneof members (et_def.proto): the element kind of each scalar and list.
enum class Element {
  none,
  real64,
  real32,
  varint_signed,
  varint_unsigned,
  varint32_signed,
  varint32_unsigned,
  zigzag64,
  zigzag32,
  fixed32u,
  fixed64u,
  fixed32s,
  fixed64s,
  boolean,
  text
};

Element element_of(int field) {
  switch ((field - 3) / 2) {  // 3/4 double, 5/6 float, 7/8 int32, ... 31/32 bytes
    case 0:
      return Element::real64;
    case 1:
      return Element::real32;
    case 2:
      return Element::varint32_signed;
    case 3:
      return Element::varint_signed;
    case 4:
      return Element::varint32_unsigned;
    case 5:
      return Element::varint_unsigned;
    case 6:
      return Element::zigzag32;
    case 7:
      return Element::zigzag64;
    case 8:
      return Element::fixed32u;
    case 9:
      return Element::fixed64u;
    case 10:
      return Element::fixed32s;
    case 11:
      return Element::fixed64s;
    case 12:
      return Element::boolean;
    case 13:
    case 14:
      return Element::text;
    default:
      return Element::none;
  }
}

WireType wire_of(Element e) {
  switch (e) {
    case Element::real64:
    case Element::fixed64u:
    case Element::fixed64s:
      return WireType::fixed64;
    case Element::real32:
    case Element::fixed32u:
    case Element::fixed32s:
      return WireType::fixed32;
    case Element::text:
      return WireType::length_delimited;
    default:
      return WireType::varint;
  }
}

std::int64_t integer_of(Element e, std::uint64_t raw) {
  switch (e) {
    case Element::varint32_signed:
    case Element::fixed32s:
      return static_cast<std::int32_t>(static_cast<std::uint32_t>(raw));
    case Element::varint32_unsigned:
    case Element::fixed32u:
      return static_cast<std::uint32_t>(raw);
    case Element::zigzag64:
      return zigzag_decode(raw);
    case Element::zigzag32:
      return zigzag_decode(static_cast<std::uint32_t>(raw));
    case Element::boolean:
      return raw != 0;
    default:
      return static_cast<std::int64_t>(raw);
  }
}

// One scalar of kind `e` whose key had wire type `type`.
void read_scalar(Reader& r, Element e, WireType type, Attribute& a, bool list) {
  if (type != wire_of(e)) {
    r.skip(type);  // a wire type the field does not have: skipped, as protobuf does
    return;
  }
  if (e == Element::text) {
    const auto bytes = r.bytes();
    if (!list) a.text = std::string(bytes);
    return;
  }
  if (e == Element::real64 || e == Element::real32) {
    const double v = e == Element::real64 ? r.double_value() : r.float_value();
    list ? a.reals.push_back(v) : void(a.real = v);
    return;
  }
  std::uint64_t raw = 0;
  if (type == WireType::varint)
    raw = r.varint();
  else if (type == WireType::fixed32)
    raw = r.fixed32();
  else
    raw = r.fixed64();
  const std::int64_t v = integer_of(e, raw);
  list ? a.integers.push_back(v) : void(a.integer = v);
}

std::uint64_t list_size(const Attribute& a) {
  return a.integers.size() + a.reals.size();
}

void read_list(std::string_view bytes, std::uint64_t base, Element e, Attribute& a,
               const ReadLimits& limits) {
  Reader r(bytes, base);
  std::uint64_t texts = 0;
  while (!r.done()) {
    const std::uint64_t at = r.offset();
    const auto k = r.key();
    if (k.field != 1) {
      r.skip(k.type);
      continue;
    }
    if (k.type == WireType::length_delimited && e != Element::text) {  // packed
      const auto packed = r.bytes();
      Reader p(packed, r.offset() - packed.size());
      while (!p.done()) {
        read_scalar(p, e, wire_of(e), a, true);
        if (list_size(a) > limits.list_values)
          throw WireError(
              at, "attribute list has more than " + std::to_string(limits.list_values) + " values");
      }
      continue;
    }
    read_scalar(r, e, k.type, a, true);
    if (e == Element::text) ++texts;
    if (list_size(a) + texts > limits.list_values)
      throw WireError(
          at, "attribute list has more than " + std::to_string(limits.list_values) + " values");
  }
}

Attribute decode_attribute(std::string_view bytes, std::uint64_t base, const ReadLimits& limits) {
  Attribute a;
  Reader r(bytes, base);
  while (!r.done()) {
    const auto k = r.key();
    if (k.field == 1 && k.type == WireType::length_delimited) {
      a.name = std::string(r.bytes());
      continue;
    }
    const Element e = element_of(k.field);
    if (k.field < 3 || k.field > 32 || e == Element::none) {
      r.skip(k.type);  // doc_string and unknown fields
      continue;
    }
    // A oneof holds its last member.
    a = Attribute{std::move(a.name), k.field, 0, 0, {}, {}, {}};
    if (k.field % 2 == 0) {  // the *List messages
      if (k.type != WireType::length_delimited) {
        r.skip(k.type);
        a.field = 0;
        continue;
      }
      const auto list = r.bytes();
      read_list(list, r.offset() - list.size(), e, a, limits);
    } else {
      read_scalar(r, e, k.type, a, false);
    }
  }
  return a;
}

void encode_attribute(Writer& w, const Attribute& a) {
  Writer m;
  if (!a.name.empty()) m.bytes_field(1, a.name);
  switch (a.field) {
    case 3:
      m.double_field(3, a.real);
      break;
    case 7:
    case 9:
      m.int64_field(a.field, a.integer);
      break;
    case 13:
      m.uint64_field(13, static_cast<std::uint64_t>(a.integer));
      break;
    case 27:
      m.bool_field(27, a.integer != 0);
      break;
    case 29:
      m.bytes_field(29, a.text);
      break;
    case 10: {
      Writer packed;
      for (auto v : a.integers) packed.varint(static_cast<std::uint64_t>(v));
      Writer list;
      if (!a.integers.empty()) list.bytes_field(1, packed.bytes());
      m.bytes_field(10, list.bytes());
      break;
    }
    default:
      break;  // the writer uses only these members
  }
  w.bytes_field(10, m.bytes());
}

void encode_packed(Writer& w, int field, const std::vector<std::uint64_t>& values) {
  if (values.empty()) return;
  Writer packed;
  for (auto v : values) packed.varint(v);
  w.bytes_field(field, packed.bytes());
}

// A repeated uint64 field, packed or not.
void read_ids(Reader& r, WireType type, std::vector<std::uint64_t>& out, std::uint64_t& total,
              const ReadLimits& limits, std::uint64_t at) {
  auto check = [&] {
    if (++total > limits.dependencies)
      throw WireError(
          at, "node has more than " + std::to_string(limits.dependencies) + " dependencies");
  };
  if (type == WireType::varint) {
    out.push_back(r.varint());
    check();
    return;
  }
  if (type != WireType::length_delimited) {
    r.skip(type);
    return;
  }
  const auto bytes = r.bytes();
  Reader p(bytes, r.offset() - bytes.size());
  while (!p.done()) {
    out.push_back(p.varint());
    check();
  }
}

// A varint field into `out`; a field written with another wire type is skipped, as
// protobuf does. Returns whether it was read.
bool read_varint(Reader& r, WireType type, std::uint64_t& out) {
  if (type != WireType::varint) {
    r.skip(type);
    return false;
  }
  out = r.varint();
  return true;
}

// A length-delimited field's bytes, or nothing (skipped) when written with another wire type.
std::optional<std::string_view> read_bytes(Reader& r, WireType type) {
  if (type != WireType::length_delimited) {
    r.skip(type);
    return std::nullopt;
  }
  return r.bytes();
}

// One more attribute decoded from `bytes` (which ended at the reader's offset) into `attrs`,
// refused past the limit; `what` names the message.
void add_attribute(std::vector<Attribute>& attrs, std::string_view bytes, const Reader& r,
                   std::uint64_t at, const ReadLimits& limits, const char* what) {
  if (attrs.size() >= limits.attributes)
    throw WireError(at, std::string(what) + " has more than " + std::to_string(limits.attributes) +
                            " attributes");
  attrs.push_back(decode_attribute(bytes, r.offset() - bytes.size(), limits));
}

std::string where(const std::string& name, std::uint64_t offset,
                  std::optional<std::uint64_t> node) {
  return name + ": byte " + std::to_string(offset) +
         (node ? " (node " + std::to_string(*node) + ")" : std::string()) + ": ";
}

}  // namespace

std::string to_string(NodeType type) {
  static const char* const names[] = {"INVALID_NODE",   "METADATA_NODE", "MEM_LOAD_NODE",
                                      "MEM_STORE_NODE", "COMP_NODE",     "COMM_SEND_NODE",
                                      "COMM_RECV_NODE", "COMM_COLL_NODE"};
  const int t = static_cast<int>(type);
  return t >= 0 && t < 8 ? names[t] : "node type " + std::to_string(t);
}

std::string to_string(CommType type) {
  static const char* const names[] = {
      "ALL_REDUCE", "REDUCE",         "ALL_GATHER",           "GATHER", "SCATTER", "BROADCAST",
      "ALL_TO_ALL", "REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK", "BARRIER"};
  const int t = static_cast<int>(type);
  return t >= 0 && t < 10 ? names[t] : "comm_type " + std::to_string(t);
}

bool Attribute::is_integer() const {
  return field >= 7 && field <= 27 && field % 2 == 1 && field != 3 && field != 5;
}

bool Attribute::is_integer_list() const {
  return field >= 8 && field <= 28 && field % 2 == 0;
}

namespace {
// One attribute of the oneof member `field` holding `integer` (or `real`, `text`, `list`).
Attribute member(std::string name, int field, std::int64_t integer = 0, double real = 0,
                 std::string text = {}, std::vector<std::int64_t> list = {}) {
  return Attribute{std::move(name), field, integer, real, std::move(text), std::move(list), {}};
}
}  // namespace

Attribute Attribute::int64(std::string name, std::int64_t v) {
  return member(std::move(name), 9, v);
}
Attribute Attribute::int32(std::string name, std::int32_t v) {
  return member(std::move(name), 7, v);
}
Attribute Attribute::uint64(std::string name, std::uint64_t v) {
  return member(std::move(name), 13, static_cast<std::int64_t>(v));
}
Attribute Attribute::boolean(std::string name, bool v) {
  return member(std::move(name), 27, v);
}
Attribute Attribute::real64(std::string name, double v) {
  return member(std::move(name), 3, 0, v);
}
Attribute Attribute::string(std::string name, std::string v) {
  return member(std::move(name), 29, 0, 0, std::move(v));
}
Attribute Attribute::int64_list(std::string name, std::vector<std::int64_t> v) {
  return member(std::move(name), 10, 0, 0, {}, std::move(v));
}

const Attribute* Node::attr(std::string_view name) const {
  for (const auto& a : attrs)
    if (a.name == name) return &a;
  return nullptr;
}

std::string encode(const GlobalMetadata& m) {
  Writer w;
  if (!m.version.empty()) w.bytes_field(1, m.version);
  for (const auto& a : m.attrs) {
    Writer one;
    encode_attribute(one, a);
    // encode_attribute writes field 10 (Node.attr); GlobalMetadata.attr is field 2.
    Reader r(one.bytes());
    (void)r.key();
    w.bytes_field(2, r.bytes());
  }
  return w.bytes();
}

std::string encode(const Node& n) {
  Writer w;
  if (n.id) w.uint64_field(1, n.id);
  if (!n.name.empty()) w.bytes_field(2, n.name);
  if (n.type != NodeType::invalid) w.uint64_field(3, static_cast<std::uint64_t>(n.type));
  encode_packed(w, 4, n.ctrl_deps);
  encode_packed(w, 5, n.data_deps);
  if (n.start_time_micros) w.uint64_field(6, n.start_time_micros);
  if (n.duration_micros) w.uint64_field(7, n.duration_micros);
  for (const auto& a : n.attrs) encode_attribute(w, a);
  return w.bytes();
}

GlobalMetadata decode_metadata(std::string_view bytes, std::uint64_t base,
                               const ReadLimits& limits) {
  GlobalMetadata m;
  Reader r(bytes, base);
  while (!r.done()) {
    const std::uint64_t at = r.offset();
    const auto k = r.key();
    if (k.field == 1) {
      if (auto v = read_bytes(r, k.type)) m.version = std::string(*v);
    } else if (k.field == 2) {
      if (auto a = read_bytes(r, k.type)) add_attribute(m.attrs, *a, r, at, limits, "metadata");
    } else {
      r.skip(k.type);
    }
  }
  return m;
}

Node decode_node(std::string_view bytes, std::uint64_t base, const ReadLimits& limits) {
  Node n;
  Reader r(bytes, base);
  std::uint64_t deps = 0;
  while (!r.done()) {
    const std::uint64_t at = r.offset();
    const auto k = r.key();
    switch (k.field) {
      case 1:
        read_varint(r, k.type, n.id);
        break;
      case 2:
        if (auto v = read_bytes(r, k.type)) n.name = std::string(*v);
        break;
      case 3: {
        std::uint64_t t = 0;
        // An enum is an int32 on the wire: values outside it are kept as an invalid type.
        if (read_varint(r, k.type, t))
          n.type = static_cast<NodeType>(t > 0x7fffffff ? -1 : static_cast<int>(t));
        break;
      }
      case 4:
        read_ids(r, k.type, n.ctrl_deps, deps, limits, at);
        break;
      case 5:
        read_ids(r, k.type, n.data_deps, deps, limits, at);
        break;
      case 6:
        read_varint(r, k.type, n.start_time_micros);
        break;
      case 7:
        read_varint(r, k.type, n.duration_micros);
        break;
      case 10:
        if (auto a = read_bytes(r, k.type)) add_attribute(n.attrs, *a, r, at, limits, "node");
        break;
      default:
        r.skip(k.type);  // inputs, outputs and fields newer than this reader
    }
  }
  return n;
}

void read_trace_bytes(std::string_view data, const std::string& name, const ReadLimits& limits,
                      const std::function<void(const GlobalMetadata&)>& on_metadata,
                      const std::function<void(const Node&)>& on_node) {
  std::uint64_t pos = 0;
  bool metadata = false;
  std::uint64_t nodes = 0;
  std::optional<std::uint64_t> last_id;  // the node before, for errors between nodes
  if (data.empty()) throw TraceError(name + ": byte 0: empty file (no GlobalMetadata)");
  while (pos < data.size()) {
    const std::uint64_t at = pos;
    std::optional<std::uint64_t> id;
    try {
      Reader r(data.substr(pos), pos);
      const std::uint64_t size = r.varint();
      const std::uint64_t start = r.offset();
      const std::uint64_t left = data.size() - start;
      if (size > limits.message_bytes)
        throw TraceError(where(name, at, last_id) + "message of " + std::to_string(size) +
                         " bytes is over the limit of " + std::to_string(limits.message_bytes));
      if (size > left)
        throw TraceError(where(name, at, last_id) + "truncated: a message of " +
                         std::to_string(size) + " bytes with " + std::to_string(left) +
                         " left in the file");
      const std::string_view message = data.substr(start, size);
      pos = start + size;
      if (!metadata) {
        on_metadata(decode_metadata(message, start, limits));
        metadata = true;
        continue;
      }
      if (++nodes > limits.nodes)
        throw TraceError(where(name, at, last_id) + "more than " + std::to_string(limits.nodes) +
                         " nodes, over the limit");
      Node n = decode_node(message, start, limits);
      id = n.id;
      on_node(n);
      last_id = n.id;
    } catch (const WireError& e) {
      throw TraceError(where(name, e.offset, id ? id : last_id) + e.what());
    }
  }
}

void read_trace(const std::string& path, const ReadLimits& limits,
                const std::function<void(const GlobalMetadata&)>& on_metadata,
                const std::function<void(const Node&)>& on_node) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw TraceError(path + ": cannot read: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw TraceError(path + ": not a regular file");
  if (static_cast<std::uint64_t>(st.st_size) > limits.file_bytes)
    throw TraceError(path + ": " + std::to_string(st.st_size) + " bytes, over the limit of " +
                     std::to_string(limits.file_bytes) + " bytes a file");
  std::ifstream in(path, std::ios::binary);
  std::string data(static_cast<std::size_t>(st.st_size), '\0');
  if (!in || !in.read(data.data(), static_cast<std::streamsize>(data.size())))
    throw TraceError(path + ": cannot read: " + std::strerror(errno));
  read_trace_bytes(data, path, limits, on_metadata, on_node);
}

GlobalMetadata read_metadata(const std::string& path, const ReadLimits& limits) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TraceError(path + ": cannot read: " + std::strerror(errno));
  std::string head(10, '\0');
  in.read(head.data(), 10);
  head.resize(static_cast<std::size_t>(in.gcount()));
  std::uint64_t size = 0;
  std::uint64_t start = 0;
  try {
    Reader r(head);
    size = r.varint();
    start = r.offset();
  } catch (const WireError& e) {
    throw TraceError(where(path, e.offset, std::nullopt) + e.what());
  }
  if (size > limits.message_bytes)
    throw TraceError(where(path, 0, std::nullopt) + "metadata of " + std::to_string(size) +
                     " bytes is over the limit of " + std::to_string(limits.message_bytes));
  std::string message(size, '\0');
  in.clear();
  in.seekg(static_cast<std::streamoff>(start));
  in.read(message.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uint64_t>(in.gcount()) != size)
    throw TraceError(where(path, 0, std::nullopt) + "truncated: a message of " +
                     std::to_string(size) + " bytes");
  try {
    return decode_metadata(message, start, limits);
  } catch (const WireError& e) {
    throw TraceError(where(path, e.offset, std::nullopt) + e.what());
  }
}

TraceWriter::TraceWriter(const std::string& path, const GlobalMetadata& metadata) : path_(path) {
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw std::runtime_error(path + ": cannot write: " + std::strerror(errno));
  static constexpr std::size_t kBuffer = 1 << 16;
  std::setvbuf(file_, nullptr, _IOFBF, kBuffer);
  put(encode(metadata));
}

TraceWriter::~TraceWriter() {
  if (file_) std::fclose(file_);
}

void TraceWriter::put(const std::string& message) {
  buffer_.clear();
  buffer_.varint(message.size());
  buffer_.raw(message);
  if (std::fwrite(buffer_.bytes().data(), 1, buffer_.bytes().size(), file_) !=
      buffer_.bytes().size())
    throw std::runtime_error(path_ + ": write failed: " + std::strerror(errno));
  bytes_ += buffer_.bytes().size();
}

void TraceWriter::write(const Node& node) {
  put(encode(node));
}

void TraceWriter::close() {
  if (!file_) return;
  const bool bad = std::ferror(file_) != 0;
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (bad || rc != 0) throw std::runtime_error(path_ + ": write failed: " + std::strerror(errno));
}

std::string trace_path(const std::string& prefix, int rank) {
  return prefix + "." + std::to_string(rank) + ".et";
}

}  // namespace hgsim::chakra
