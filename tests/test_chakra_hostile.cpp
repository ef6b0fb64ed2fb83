// Hostile Chakra input (part of the sanitizer pass): the wire format against bytes written by
// hand from et_def.proto's field numbers (mlcommons/chakra 21585d8,
// schema/protobuf/et_def.proto), damaged, truncated and oversized files, and bad traces, each
// one error naming the file, the offset or node and what is wrong, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "chakra/et.hpp"
#include "chakra/wire.hpp"
#include "chakra_helpers.hpp"
#include "sim/chakra.hpp"

using namespace hgsim;
using namespace hgsim::testing;

namespace {

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

}  // namespace
