// MLCommons Chakra execution traces (ET): one file per rank, `<prefix>.<rank>.et`, holding a
// GlobalMetadata message then Node messages, each prefixed by its length as a varint (what
// Chakra's protoio writes and ASTRA-sim's feeder reads; no magic number, no gzip).
//
// The messages and their field numbers are schema/protobuf/et_def.proto of
// github.com/mlcommons/chakra at commit 21585d8f2d65603d791d2121e3d4632351120262:
//   GlobalMetadata { string version = 1; repeated AttributeProto attr = 2; }
//   Node { uint64 id = 1; string name = 2; NodeType type = 3; repeated uint64 ctrl_deps = 4;
//          repeated uint64 data_deps = 5; uint64 start_time_micros = 6;
//          uint64 duration_micros = 7; IOInfo inputs = 8; IOInfo outputs = 9;
//          repeated AttributeProto attr = 10; }
//   AttributeProto { string name = 1; string doc_string = 2; oneof value { double 3,
//          DoubleList 4, float 5, FloatList 6, int32 7, Int32List 8, int64 9, Int64List 10,
//          uint32 11, Uint32List 12, uint64 13, Uint64List 14, sint32 15, Sint32List 16,
//          sint64 17, Sint64List 18, fixed32 19, Fixed32List 20, fixed64 21, Fixed64List 22,
//          sfixed32 23, Sfixed32List 24, sfixed64 25, Sfixed64List 26, bool 27, BoolList 28,
//          string 29, StringList 30, bytes 31, BytesList 32 } }   (each *List: repeated values = 1)
// The feeder (src/feeder/et_feeder_node.cpp) reads these attributes by name and type:
// is_cpu_op bool, num_ops int64, tensor_size uint64, comm_type int64, comm_priority int32,
// comm_size int64, comm_src int32, comm_dst int32, comm_tag int32, pg_name string.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "chakra/wire.hpp"

namespace hgsim::chakra {

enum class NodeType : int {
  invalid = 0,
  metadata = 1,
  mem_load = 2,
  mem_store = 3,
  comp = 4,
  comm_send = 5,
  comm_recv = 6,
  comm_coll = 7,
};
std::string to_string(NodeType type);  // "COMP_NODE", or "node type 12"

enum class CommType : int {
  all_reduce = 0,
  reduce = 1,
  all_gather = 2,
  gather = 3,
  scatter = 4,
  broadcast = 5,
  all_to_all = 6,
  reduce_scatter = 7,
  reduce_scatter_block = 8,
  barrier = 9,
};
std::string to_string(CommType type);  // "ALL_REDUCE", or "comm_type 12"

// One AttributeProto: its name and the oneof member it holds (`field`, the .proto's number).
// Integers of every kind land in `integer`, reals in `real`, strings and bytes in `text`;
// integer and bool lists in `integers`, real lists in `reals` (string and bytes lists are
// counted, not kept).
struct Attribute {
  std::string name;
  int field = 0;  // 0: no value
  std::int64_t integer = 0;
  double real = 0;
  std::string text;
  std::vector<std::int64_t> integers;
  std::vector<double> reals;

  bool is_integer() const;  // int32/int64/uint32/uint64/sint*/fixed*/sfixed*/bool
  bool is_real() const { return field == 3 || field == 5; }
  bool is_integer_list() const;
  bool is_string() const { return field == 29 || field == 31; }

  static Attribute int64(std::string name, std::int64_t v);                    // int64_val (9)
  static Attribute int32(std::string name, std::int32_t v);                    // int32_val (7)
  static Attribute uint64(std::string name, std::uint64_t v);                  // uint64_val (13)
  static Attribute boolean(std::string name, bool v);                          // bool_val (27)
  static Attribute real64(std::string name, double v);                         // double_val (3)
  static Attribute string(std::string name, std::string v);                    // string_val (29)
  static Attribute int64_list(std::string name, std::vector<std::int64_t> v);  // (10, packed)
};

struct GlobalMetadata {
  std::string version;
  std::vector<Attribute> attrs;
};

struct Node {
  std::uint64_t id = 0;
  std::string name;
  NodeType type = NodeType::invalid;
  std::vector<std::uint64_t> ctrl_deps;
  std::vector<std::uint64_t> data_deps;
  std::uint64_t start_time_micros = 0;
  std::uint64_t duration_micros = 0;
  std::vector<Attribute> attrs;  // inputs and outputs (IOInfo) are skipped when read

  const Attribute* attr(std::string_view name) const;
};

// What a reader accepts (the defaults are far above any real trace; beyond them the file is
// refused as over the limit).
struct ReadLimits {
  std::uint64_t file_bytes = std::uint64_t{4} << 30;      // one rank's file
  std::uint64_t message_bytes = std::uint64_t{64} << 20;  // one message
  std::uint64_t nodes = 100'000'000;                      // nodes of one file
  std::uint64_t attributes = 4096;                        // attributes of one node
  std::uint64_t dependencies = 1'000'000;                 // deps of one node, both kinds
  std::uint64_t list_values = 1'000'000;                  // values of one attribute list
};

// A trace that cannot be read: names the file, the byte offset, the node id when known, and
// what is wrong ("t.0.et: byte 1234 (node 17): truncated varint").
struct TraceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string encode(const GlobalMetadata& m);
std::string encode(const Node& n);
// Decode one message's bytes (`base`: their offset in the file, for errors; WireError on
// malformed input, std::runtime_error on a value out of range or over a limit).
GlobalMetadata decode_metadata(std::string_view bytes, std::uint64_t base = 0,
                               const ReadLimits& limits = {});
Node decode_node(std::string_view bytes, std::uint64_t base = 0, const ReadLimits& limits = {});

// Reads one rank's file: `on_metadata` once, then `on_node` for each node in file order.
// Throws TraceError (file, offset, node id, what) on anything malformed or over a limit.
void read_trace(const std::string& path, const ReadLimits& limits,
                const std::function<void(const GlobalMetadata&)>& on_metadata,
                const std::function<void(const Node&)>& on_node);
// The GlobalMetadata of one rank's file alone (its first message).
GlobalMetadata read_metadata(const std::string& path, const ReadLimits& limits = {});
// The same, from bytes in memory (`name` stands for the file in messages).
void read_trace_bytes(std::string_view data, const std::string& name, const ReadLimits& limits,
                      const std::function<void(const GlobalMetadata&)>& on_metadata,
                      const std::function<void(const Node&)>& on_node);

// Writes one rank's file as it goes: the metadata, then nodes. close() flushes and throws
// std::runtime_error naming the file when anything failed to be written.
class TraceWriter {
 public:
  TraceWriter(const std::string& path, const GlobalMetadata& metadata);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;
  void write(const Node& node);
  void close();
  std::uint64_t bytes_written() const { return bytes_; }

 private:
  void put(const std::string& message);
  std::string path_;
  std::FILE* file_ = nullptr;
  std::uint64_t bytes_ = 0;
  Writer buffer_;
};

// The file of `rank`: "<prefix>.<rank>.et".
std::string trace_path(const std::string& prefix, int rank);

}  // namespace hgsim::chakra
