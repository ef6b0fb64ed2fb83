// What a codec costs a transfer: the bytes on the wire and the time to encode at the
// sender and decode at the receiver. The one place that decides both (STYLE.md, one source
// of truth): the simulator and the planner call code_transfer and nothing else.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compress/codec.hpp"
#include "compress/codec_spec.hpp"
#include "core/scenario.hpp"
#include "core/units.hpp"
#include "kernels/gpu_catalog.hpp"

namespace hgsim::compress {

// The storage type of a training precision: tf32 tensors are fp32 in memory, fp8 training
// keeps tensors between layers in bf16 (Transformer Engine's convention, as
// core::element_bytes does).
DType storage_dtype(core::Precision);

struct TransferCoding {
  core::Bytes wire_bytes;  // what crosses the link
  core::Seconds encode;    // at the sender
  core::Seconds decode;    // at the receiver
  std::string provenance;  // where the times come from: "estimated" or "measured:<file>"
};

// The shape a transfer of `elements` values is coded in across the WAN: rows of `columns`
// values (the hidden size, the last dimension of activations and of most weights),
// [max(ceil(elements / columns), 1), max(columns, 1)], the last row zero-padded when
// `columns` does not divide `elements`. The one rule: the simulator and the planner
// (sim::code_wan_transfer) cost this shape and the live runner (_hgsim.codec_shape) pads
// and codes it, so that a low-rank codec (PowerSGD) sees a matrix in both. `elements` may
// be fractional (a share of a transfer's bytes); it is rounded up.
std::vector<std::int64_t> wan_codec_shape(double elements, std::int64_t columns);

// A tensor of `shape` (row-major; PowerSGD treats the last dimension as columns and the
// rest as rows) in `dtype`, sent under `spec` by a GPU of type `device`.
//
// wire_bytes is exactly compress::encoded_bytes(spec, shape, storage_dtype(dtype)) (header
// included), except for `none`, which is no encoding at all: the raw tensor.
//
// encode and decode are estimates ("estimated"), one formula for every codec: a roofline
//   time = launch + max(bytes moved / (kMemoryEfficiency x datasheet memory bandwidth),
//                       FLOPs / (kFlopEfficiency x datasheet fp32 peak))
// where the bytes moved count every pass a GPU implementation makes over its data:
//   fp16/bf16, fp8 per-block, int8, int4: read the tensor, write the encoding (decode: the
//     reverse); fp8 per-tensor reads the tensor twice (the absmax pass first);
//   top-k: five reads of the tensor (a four-pass radix select of the k-th magnitude, then
//     the collecting pass) plus the encoding; random-k: one 32-byte sector per kept element
//     plus the encoding; decode writes the whole tensor (zeros) and reads the encoding;
//   PowerSGD: two reads of the matrix (P = M Q, Q = M^T P) plus the encoding, 4 m n r +
//     4 m r^2 FLOPs (the steady state with warm start; a tensor's first step does one more
//     power iteration); decode reads P and Q, writes the matrix, 2 m n r FLOPs;
//   error feedback adds reading the residual, writing it back and one decode (12 bytes per
//     element plus the decode's bytes).
// Until the profiler measures codec kernels per device, this is the model.
constexpr double kMemoryEfficiency = 0.7;  // streaming kernels reach 70-90% of the datasheet
constexpr double kFlopEfficiency = 0.5;    // skinny fp32 matmuls (rank <= 32)
constexpr double kLaunchSeconds = 5e-6;    // one kernel launch and its tail, per direction
TransferCoding code_transfer(const CodecSpec& spec, const std::vector<std::int64_t>& shape,
                             core::Precision dtype, const kernels::GpuSpec& device);

}  // namespace hgsim::compress
