// MLCommons Chakra execution traces: the wire format against bytes written by hand from
// et_def.proto's field numbers (mlcommons/chakra 21585d8, schema/protobuf/et_def.proto), hostile
// files, a hand-written two-rank trace against its closed form, a collective across a WAN
// link, and export then import of shipped scenarios keeping their iteration time.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "chakra/et.hpp"
#include "chakra/wire.hpp"
#include "sim/chakra.hpp"
#include "sim_helpers.hpp"

using namespace hgsim;
using hgsim::testing::checked;

namespace {

std::string hex(const std::string& hex_text) {
  std::string out;
  std::string digits;
  for (char c : hex_text)
    if (std::isxdigit(static_cast<unsigned char>(c))) digits.push_back(c);
  for (std::size_t i = 0; i + 1 < digits.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  return out;
}

// A fresh folder for one test's files.
std::filesystem::path scratch(const std::string& name) {
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
const char* const kCompNodeHex =
    "08 01 12 01 63 18 04 2a 01 00 38 05 52 0c 0a 07 6e 75 6d 5f 6f 70 73 48 e8 07";

TEST(ChakraWire, NodeEncodesToTheBytesWrittenByHandFromTheProto) {
  chakra::Node n;
  n.id = 1;
  n.name = "c";
  n.type = chakra::NodeType::comp;
  n.data_deps = {0};
  n.duration_micros = 5;
  n.attrs.push_back(chakra::Attribute::int64("num_ops", 1000));
  EXPECT_EQ(chakra::encode(n), hex(kCompNodeHex));
  const chakra::Node back = chakra::decode_node(hex(kCompNodeHex));
  EXPECT_EQ(back.id, 1u);
  EXPECT_EQ(back.name, "c");
  EXPECT_EQ(back.type, chakra::NodeType::comp);
  EXPECT_EQ(back.data_deps, std::vector<std::uint64_t>{0});
  EXPECT_EQ(back.duration_micros, 5u);
  ASSERT_NE(back.attr("num_ops"), nullptr);
  EXPECT_EQ(back.attr("num_ops")->integer, 1000);
  // GlobalMetadata {version "0.0.4"}: 0a 05 "0.0.4".
  chakra::GlobalMetadata m;
  m.version = "0.0.4";
  EXPECT_EQ(chakra::encode(m), hex("0a 05 30 2e 30 2e 34"));
}

// What other writers may emit: unpacked repeated deps, a negative int32 (ten bytes), sint64
// (zigzag), double and fixed32 values, a packed Int64List, and fields this reader does not
// know (skipped by wire type).
TEST(ChakraWire, ReadsUnpackedDepsZigzagFixedAndSkipsUnknownFields) {
  const std::string bytes =
      hex("08 07"                                            // id 7
          "28 03 28 09"                                      // data_deps 3, 9 unpacked
          "20 02"                                            // ctrl_deps 2
          "78 05"                                            // field 15 varint: unknown
          "82 01 02 aa bb"                                   // field 16 length 2: unknown
          "85 01 01 02 03 04"                                // field 16 fixed32: unknown
          "52 0e 0a 01 61 38 ff ff ff ff ff ff ff ff ff 01"  // attr a int32_val -1
          "52 06 0a 01 62 88 01 05"                          // attr b sint64_val (17) zigzag 5 = -3
          "52 0c 0a 01 64 19 00 00 00 00 00 00 f8 3f"        // attr d double_val 1.5
          "52 09 0a 01 66 9d 01 2a 00 00 00"                 // attr f fixed32_val (19) 42
          "52 0a 0a 01 6c 52 05 0a 03 01 96 01"              // attr l int64_list [1, 150] packed
      );
  const chakra::Node n = chakra::decode_node(bytes);
  EXPECT_EQ(n.id, 7u);
  EXPECT_EQ(n.data_deps, (std::vector<std::uint64_t>{3, 9}));
  EXPECT_EQ(n.ctrl_deps, std::vector<std::uint64_t>{2});
  ASSERT_EQ(n.attrs.size(), 5u);
  EXPECT_EQ(n.attr("a")->integer, -1);
  EXPECT_EQ(n.attr("b")->integer, -3);
  EXPECT_TRUE(n.attr("d")->is_real());
  EXPECT_EQ(n.attr("d")->real, 1.5);
  EXPECT_EQ(n.attr("f")->integer, 42);
  EXPECT_TRUE(n.attr("l")->is_integer_list());
  EXPECT_EQ(n.attr("l")->integers, (std::vector<std::int64_t>{1, 150}));
}

TEST(ChakraWire, VarintsAndZigzagAtTheirEdges) {
  chakra::Writer w;
  w.varint(~std::uint64_t{0});
  EXPECT_EQ(w.bytes(), hex("ff ff ff ff ff ff ff ff ff 01"));
  chakra::Reader r(w.bytes());
  EXPECT_EQ(r.varint(), ~std::uint64_t{0});
  for (std::int64_t v : {0LL, -1LL, 1LL, -2LL, 2147483647LL, -2147483648LL})
    EXPECT_EQ(chakra::zigzag_decode(chakra::zigzag_encode(v)), v);
  EXPECT_EQ(chakra::zigzag_encode(-1), 1u);  // protobuf's table: 0->0, -1->1, 1->2, -2->3
  EXPECT_EQ(chakra::zigzag_encode(1), 2u);
  EXPECT_EQ(chakra::zigzag_encode(-2), 3u);
  const std::string too_long = hex("ff ff ff ff ff ff ff ff ff ff 01");
  chakra::Reader bad(too_long, 100);
  try {
    (void)bad.varint();
    FAIL() << "an 11-byte varint was read";
  } catch (const chakra::WireError& e) {
    EXPECT_EQ(e.offset, 100u);
  }
}

std::string message(const std::string& bytes) {
  chakra::Writer w;
  w.varint(bytes.size());
  return w.bytes() + bytes;
}

std::string error_of(const std::string& data, const chakra::ReadLimits& limits = {}) {
  try {
    chakra::read_trace_bytes(
        data, "t.0.et", limits, [](const auto&) {}, [](const auto&) {});
  } catch (const chakra::TraceError& e) {
    return e.what();
  }
  return "";
}

TEST(ChakraTrace, HostileFilesGiveOneErrorNamingTheFileOffsetAndNode) {
  const std::string meta = message(hex("0a 05 30 2e 30 2e 34"));
  const std::string node = message(hex(kCompNodeHex));
  EXPECT_EQ(error_of(meta + node), "");
  // Cut inside the node: the length prefix promises 26 bytes, 23 are there.
  const std::string cut = (meta + node).substr(0, meta.size() + node.size() - 3);
  EXPECT_EQ(error_of(cut),
            "t.0.et: byte 8: truncated: a message of 26 bytes with 23 left in "
            "the file");
  // A length over the limit, named before anything is read.
  chakra::ReadLimits small;
  small.message_bytes = 16;
  EXPECT_NE(
      error_of(meta + node, small).find("byte 8: message of 26 bytes is over the limit of 16"),
      std::string::npos);
  // Damage inside the second node: its attribute's length runs past the message.
  std::string bad = hex(kCompNodeHex);
  bad[13] = '\x20';  // the attribute's length, 12, becomes 32
  const std::string e = error_of(meta + node + message(bad));
  EXPECT_NE(e.find("t.0.et: byte"), std::string::npos) << e;
  EXPECT_NE(e.find("(node 1)"), std::string::npos) << e;
  EXPECT_NE(e.find("runs past the end"), std::string::npos) << e;
  // Over the node limit.
  small = {};
  small.nodes = 1;
  EXPECT_NE(error_of(meta + node + node, small).find("more than 1 nodes"), std::string::npos);
  EXPECT_NE(error_of("").find("empty file"), std::string::npos);
  EXPECT_NE(error_of(std::string(12, '\xff')).find("varint"), std::string::npos);
}

// ---- import --------------------------------------------------------------------------------

// Two nodes of one GPU each, joined by a 100 Gbit/s NIC with 5 us: every transfer between
// them takes bytes / B + a with B = 12.5 GB/s and a = 2 x 5 us (out of one NIC, into the
// other), as tests/test_sim.cpp's ring tests have it.
std::string two_nodes(const std::string& extra = "") {
  return std::string("name: two\n") + hgsim::testing::kTinyModel +
         "training: {global_batch: 1, seq_len: 128, precision: bf16}\n"
         "clusters:\n  - {name: c, gpu: A100-80GB-SXM, nodes: 2, gpus_per_node: 1, "
         "nvlink: {bandwidth: 300GB/s, latency: 1us}, nic: {bandwidth: 100Gbps, latency: 5us}}\n" +
         extra +
         "strategy:\n  pipelines:\n    - micro_batches: 1\n      stages:\n"
         "        - {cluster: c, layers: 8}\n";
}

chakra::Node comp(std::uint64_t id, std::uint64_t micros, std::vector<std::uint64_t> deps = {}) {
  chakra::Node n;
  n.id = id;
  n.name = "compute " + std::to_string(id);
  n.type = chakra::NodeType::comp;
  n.duration_micros = micros;
  n.data_deps = std::move(deps);
  return n;
}

chakra::Node p2p(std::uint64_t id, bool send, int peer, std::int64_t bytes,
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

chakra::Node all_reduce(std::uint64_t id, std::int64_t bytes, std::vector<std::uint64_t> deps) {
  chakra::Node n;
  n.id = id;
  n.type = chakra::NodeType::comm_coll;
  n.data_deps = std::move(deps);
  n.attrs.push_back(chakra::Attribute::int64("comm_type", 0));  // ALL_REDUCE
  n.attrs.push_back(chakra::Attribute::int64("comm_size", bytes));
  return n;
}

void write_rank(const std::string& prefix, int rank, const std::vector<chakra::Node>& nodes) {
  chakra::GlobalMetadata m;
  m.version = "0.0.4";
  chakra::TraceWriter w(chakra::trace_path(prefix, rank), m);
  for (const auto& n : nodes) w.write(n);
  w.close();
}

core::Json run_trace(const std::string& yaml, const std::string& prefix,
                     std::string* error = nullptr) {
  const auto c = checked(yaml);
  core::Diagnostics diags;
  const auto out = sim::simulate_chakra(c.scenario, prefix, diags);
  if (error) *error = diags.format();
  return out ? *out : core::Json();
}

// Rank 0: 1 ms of compute, then sends 100 MB to rank 1; rank 1: 2 ms of compute, and 0.5 ms
// after the receive; then both all-reduce 1 GB. The transfer starts at 1 ms (both sides
// ready: the receive has no dependency) and ends at 1 ms + S1/B + a; rank 1 is ready for the
// all-reduce 0.5 ms later, the later member; a ring of two then takes two steps of S2/2, each
// waiting for the other's previous one: ready + S2/B + 2a.
TEST(ChakraImport, TwoRankTraceGivesTheClosedForm) {
  const auto dir = scratch("two-rank");
  const std::string prefix = (dir / "t").string();
  write_rank(prefix, 0,
             {comp(0, 1000), p2p(1, true, 1, 100'000'000, {0}), all_reduce(2, 1'000'000'000, {1})});
  write_rank(prefix, 1,
             {comp(0, 2000), p2p(1, false, 0, 100'000'000), comp(2, 500, {1}),
              all_reduce(3, 1'000'000'000, {2, 0})});
  std::string error;
  const core::Json out = run_trace(two_nodes(), prefix, &error);
  ASSERT_FALSE(out.is_null()) << error;
  const double B = 100e9 / 8, a = 2 * 5e-6;
  const double transfer_end = 1e-3 + 1e8 / B + a;
  const double expected = transfer_end + 0.5e-3 + 1e9 / B + 2 * a;
  EXPECT_NEAR(out["iteration_time_s"].get<double>(), expected, 1e-9 * expected);
  EXPECT_EQ(out["ranks"], 2);
  EXPECT_EQ(out["collectives"], 1);
  EXPECT_EQ(out["transfers"], 1);
  std::filesystem::remove_all(dir);
}

// One GPU in each of two clusters joined by one WAN link: an all-reduce of S between them is a
// ring of two over the WAN route, S / B_wan + 2 (nic + wan + nic latency); halving the link's
// bandwidth adds exactly S / B_wan.
TEST(ChakraImport, AllReduceAcrossTheWanIsSlowedAsTheLinkDictates) {
  const auto dir = scratch("wan");
  const std::string prefix = (dir / "t").string();
  const double S = 1e8;
  write_rank(prefix, 0, {all_reduce(0, static_cast<std::int64_t>(S), {})});
  write_rank(prefix, 1, {all_reduce(0, static_cast<std::int64_t>(S), {})});
  auto scenario = [](const std::string& wan) {
    return std::string("name: wan\n") + hgsim::testing::kTinyModel +
           "training: {global_batch: 1, seq_len: 128, precision: bf16}\n"
           "clusters:\n"
           "  - {name: a, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: {bandwidth: "
           "300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
           "  - {name: b, gpu: A100-80GB-SXM, nodes: 1, gpus_per_node: 1, nvlink: {bandwidth: "
           "300GB/s, latency: 1us}, nic: {bandwidth: 200Gbps, latency: 2us}}\n"
           "wan:\n  - {between: [a, b], bandwidth: " +
           wan +
           ", latency: 1ms, tcp_window: 1GiB}\n"
           "strategy:\n  pipelines:\n    - micro_batches: 1\n      stages:\n"
           "        - {cluster: a, layers: 8}\n";
  };
  std::string error;
  const core::Json fast = run_trace(scenario("10Gbps"), prefix, &error);
  ASSERT_FALSE(fast.is_null()) << error;
  const core::Json slow = run_trace(scenario("5Gbps"), prefix, &error);
  ASSERT_FALSE(slow.is_null()) << error;
  const double B = 10e9 / 8, a = 2e-6 + 1e-3 + 2e-6;
  const double expected = S / B + 2 * a;
  EXPECT_NEAR(fast["iteration_time_s"].get<double>(), expected, 1e-9 * expected);
  EXPECT_NEAR(slow["iteration_time_s"].get<double>() - fast["iteration_time_s"].get<double>(),
              S / B, 1e-9 * expected);
  std::filesystem::remove_all(dir);
}

// Each bad trace gives one error naming the file and the node, never a crash.
TEST(ChakraImport, BadTracesNameTheFileTheNodeAndWhatIsWrong) {
  const auto dir = scratch("bad");
  const std::string prefix = (dir / "t").string();
  auto error_for = [&](const std::vector<chakra::Node>& r0, const std::vector<chakra::Node>& r1) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    write_rank(prefix, 0, r0);
    if (!r1.empty()) write_rank(prefix, 1, r1);
    std::string error;
    const core::Json out = run_trace(two_nodes(), prefix, &error);
    EXPECT_TRUE(out.is_null());
    return error;
  };
  chakra::Node odd = comp(5, 10);
  odd.type = static_cast<chakra::NodeType>(12);
  std::string e = error_for({odd}, {comp(0, 1)});
  EXPECT_NE(e.find("t.0.et: node 5: unknown node type 12"), std::string::npos) << e;
  e = error_for({comp(0, 1, {1}), comp(1, 1, {0})}, {comp(0, 1)});
  EXPECT_NE(e.find("dependency cycle"), std::string::npos) << e;
  EXPECT_NE(e.find("t.0.et: node"), std::string::npos) << e;
  e = error_for({comp(0, 1, {9})}, {comp(0, 1)});
  EXPECT_NE(e.find("t.0.et: node 0: depends on node 9"), std::string::npos) << e;
  e = error_for({p2p(0, true, 1, 10)}, {comp(0, 1)});
  EXPECT_NE(e.find("t.0.et: node 0: COMM_SEND_NODE from rank 0 to 1 tag 3 has no matching receive"),
            std::string::npos)
      << e;
  e = error_for({all_reduce(0, 10, {}), all_reduce(1, 10, {0})}, {all_reduce(0, 10, {})});
  EXPECT_NE(e.find("collectives in group"), std::string::npos) << e;
  // Three ranks on a scenario of two GPUs.
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (int r = 0; r < 3; ++r) write_rank(prefix, r, {comp(0, 1)});
  std::string error;
  EXPECT_TRUE(run_trace(two_nodes(), prefix, &error).is_null());
  EXPECT_NE(error.find("the trace has 3 ranks and the scenario 2 GPUs"), std::string::npos)
      << error;
  // A truncated file.
  {
    std::ofstream f(chakra::trace_path(prefix, 1), std::ios::binary | std::ios::trunc);
    f << message(hex("0a 05 30 2e 30 2e 34")) << message(hex(kCompNodeHex)).substr(0, 10);
  }
  std::filesystem::remove(chakra::trace_path(prefix, 2));
  EXPECT_TRUE(run_trace(two_nodes(), prefix, &error).is_null());
  EXPECT_NE(error.find("t.1.et: byte 8: truncated"), std::string::npos) << error;
  std::filesystem::remove_all(dir);
}

// ---- round trip ----------------------------------------------------------------------------

double iteration_time(const hgsim::testing::CliResult& r) {
  EXPECT_EQ(r.status, 0) << r.err;
  if (r.status != 0) return -1;
  return core::Json::parse(r.out)["iteration_time_s"].get<double>();
}

// Export then import: the same iteration on the same GPUs, to rounding, on the shipped
// homogeneous scenarios small enough for a unit test.
TEST(ChakraRoundTrip, ShippedHomogeneousScenariosKeepTheirIterationTime) {
  for (const char* name :
       {"scenarios/examples/inline-model.yaml", "scenarios/examples/long-context.yaml"}) {
    const auto dir = scratch("round-trip");
    const std::string prefix = (dir / "it").string();
    const double simulated = iteration_time(hgsim::testing::hgsim(
        {"run", name, "--fidelity", "full", "--json", "--export-chakra", prefix}));
    const double imported =
        iteration_time(hgsim::testing::hgsim({"run", name, "--json", "--chakra", prefix}));
    EXPECT_NEAR(imported, simulated, 1e-6 * simulated) << name;
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
