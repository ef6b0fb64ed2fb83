// What a codec costs a transfer: the bytes on the wire and the time to encode at the
// sender and decode at the receiver. The one place that decides both (STYLE.md, one source
// of truth): the simulator and the planner call code_transfer and nothing else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compress/codec_spec.hpp"
#include "core/scenario.hpp"
#include "core/units.hpp"
#include "kernels/gpu_catalog.hpp"

namespace hgsim::compress {

struct TransferCoding {
  core::Bytes wire_bytes;  // what crosses the link
  core::Seconds encode;    // at the sender
  core::Seconds decode;    // at the receiver
  std::string provenance;  // where the times come from: "estimated" or "measured:<file>"
};

// A tensor of `shape` (row-major; PowerSGD treats the last dimension as columns and the
// rest as rows) in `dtype`, sent under `spec` by a GPU of type `device`.
TransferCoding code_transfer(const CodecSpec& spec, const std::vector<std::int64_t>& shape,
                             core::Precision dtype, const kernels::GpuSpec& device);

}  // namespace hgsim::compress
