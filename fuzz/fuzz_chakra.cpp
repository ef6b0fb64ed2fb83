// Fuzz target for the Chakra execution-trace reader (chakra/et.hpp): any bytes must give
// either the trace's messages or one TraceError naming the byte offset: never a crash, a
// sanitizer report, a hang or another exception. The limits are lowered so that inputs reach
// them.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "chakra/et.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  hgsim::chakra::ReadLimits limits;
  limits.message_bytes = 1 << 16;
  limits.nodes = 4096;
  limits.attributes = 64;
  limits.dependencies = 1024;
  limits.list_values = 1024;
  std::size_t seen = 0;
  try {
    hgsim::chakra::read_trace_bytes(
        bytes, "fuzz.et", limits,
        [&](const hgsim::chakra::GlobalMetadata& m) { seen += m.attrs.size(); },
        [&](const hgsim::chakra::Node& n) {
          seen += n.data_deps.size() + n.attrs.size();
          // What the writer makes of what was read must read back.
          (void)hgsim::chakra::decode_node(hgsim::chakra::encode(n));
        });
  } catch (const hgsim::chakra::TraceError&) {
  }
  return seen > 0 ? 0 : 0;
}
