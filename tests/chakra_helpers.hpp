// Helpers of the Chakra tests (tests/test_chakra.cpp, tests/test_chakra_hostile.cpp): bytes
// written by hand, a scratch folder, traces of a few nodes and a two-GPU scenario to run them.
#pragma once

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "chakra/et.hpp"
#include "chakra/wire.hpp"
#include "sim/chakra.hpp"
#include "sim_helpers.hpp"

namespace hgsim::testing {

inline std::string hex(const std::string& hex_text) {
  std::string out;
  std::string digits;
  for (char c : hex_text)
    if (std::isxdigit(static_cast<unsigned char>(c))) digits.push_back(c);
  for (std::size_t i = 0; i + 1 < digits.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  return out;
}

// A fresh folder for one test's files.
inline std::filesystem::path scratch(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("hgsim-chakra-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Node {id 1, name "c", type COMP_NODE (4), data_deps [0] packed, duration_micros 5,
// attr {name "num_ops", int64_val (9) 1000}}, field by field from et_def.proto:
//   08 01          field 1 (id) varint 1
//   12 01 63       field 2 (name) length 1, "c"
//   18 04          field 3 (type) varint 4
//   2a 01 00       field 5 (data_deps) length 1, packed varint 0
//   38 05          field 7 (duration_micros) varint 5
//   52 0c ...      field 10 (attr) length 12: 0a 07 "num_ops", 48 e8 07 (field 9 varint 1000)
inline const char* const kCompNodeHex =
    "08 01 12 01 63 18 04 2a 01 00 38 05 52 0c 0a 07 6e 75 6d 5f 6f 70 73 48 e8 07";

inline std::string message(const std::string& bytes) {
  chakra::Writer w;
  w.varint(bytes.size());
  return w.bytes() + bytes;
}

inline std::string error_of(const std::string& data, const chakra::ReadLimits& limits = {}) {
  try {
    chakra::read_trace_bytes(
        data, "t.0.et", limits, [](const auto&) {}, [](const auto&) {});
  } catch (const chakra::TraceError& e) {
    return e.what();
  }
  return "";
}

// Two nodes of one GPU each, joined by a 100 Gbit/s NIC with 5 us: every transfer between
// them takes bytes / B + a with B = 12.5 GB/s and a = 2 x 5 us (out of one NIC, into the
// other), as tests/test_sim.cpp's ring tests have it.
inline std::string two_nodes(const std::string& extra = "") {
  return std::string("name: two\n") + hgsim::testing::kTinyModel +
         "training: {global_batch: 1, seq_len: 128, precision: bf16}\n"
         "clusters:\n  - {name: c, gpu: A100-80GB-SXM, nodes: 2, gpus_per_node: 1, "
         "nvlink: {bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 100Gbps, latency: 5us}}\n" +
         extra +
         "strategy:\n  pipelines:\n    - micro_batches: 1\n      stages:\n"
         "        - {cluster: c, layers: 8}\n";
}

inline chakra::Node comp(std::uint64_t id, std::uint64_t micros,
                         std::vector<std::uint64_t> deps = {}) {
  chakra::Node n;
  n.id = id;
  n.name = "compute " + std::to_string(id);
  n.type = chakra::NodeType::comp;
  n.duration_micros = micros;
  n.data_deps = std::move(deps);
  return n;
}

inline chakra::Node p2p(std::uint64_t id, bool send, int peer, std::int64_t bytes,
                        std::vector<std::uint64_t> deps = {}) {
  chakra::Node n;
  n.id = id;
  n.type = send ? chakra::NodeType::comm_send : chakra::NodeType::comm_recv;
  n.data_deps = std::move(deps);
  n.attrs.push_back(chakra::Attribute::int32(send ? "comm_dst" : "comm_src", peer));
  n.attrs.push_back(chakra::Attribute::int64("comm_size", bytes));
  n.attrs.push_back(chakra::Attribute::int32("comm_tag", 3));
  return n;
}

inline chakra::Node all_reduce(std::uint64_t id, std::int64_t bytes,
                               std::vector<std::uint64_t> deps) {
  chakra::Node n;
  n.id = id;
  n.type = chakra::NodeType::comm_coll;
  n.data_deps = std::move(deps);
  n.attrs.push_back(chakra::Attribute::int64("comm_type", 0));  // ALL_REDUCE
  n.attrs.push_back(chakra::Attribute::int64("comm_size", bytes));
  return n;
}

inline void write_rank(const std::string& prefix, int rank,
                       const std::vector<chakra::Node>& nodes) {
  chakra::GlobalMetadata m;
  m.version = "0.0.4";
  chakra::TraceWriter w(chakra::trace_path(prefix, rank), m);
  for (const auto& n : nodes) w.write(n);
  w.close();
}

inline core::Json run_trace(const std::string& yaml, const std::string& prefix,
                            std::string* error = nullptr, bool reprice = false) {
  const auto c = checked(yaml);
  core::Diagnostics diags;
  const auto out = sim::simulate_chakra(c.scenario, prefix, diags, reprice);
  if (error) *error = diags.format();
  return out ? *out : core::Json();
}

}  // namespace hgsim::testing
