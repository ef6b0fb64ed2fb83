// The GPU catalog: datasheet figures (memory, bandwidths, peak math rates) for every GPU a
// scenario may name, the precision policy that turns a training precision into the math
// rate a GPU runs it at, and the check that resolves a scenario's GPU names.
//
// The figures live in kernels/gpus.yaml (embedded into the binary); its header explains
// the conventions: memory in GiB, bandwidths as the datasheet states them (NVLink and PCIe
// as the total of both directions), dense peak rates without sparsity, GeForce tensor
// rates with FP32 accumulation. Every row names its source and flags the figures that
// could not be confirmed.
//
// These are peaks. The compute-time model uses measured profiles where it has them and
// falls back to these figures (with an efficiency) where it does not.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/diagnostics.hpp"
#include "core/scenario.hpp"
#include "core/units.hpp"

namespace hgsim::embedded {
extern const std::string_view gpu_catalog_yaml;  // kernels/gpus.yaml
}  // namespace hgsim::embedded

namespace hgsim::kernels {

enum class Architecture { volta, turing, ampere, ada, hopper };
std::string to_string(Architecture);

struct ComputeCapability {
  int major = 0;
  int minor = 0;
  std::string to_string() const;  // "8.0"
  auto operator<=>(const ComputeCapability&) const = default;
};

struct GpuSpec {
  std::string name;                  // e.g. "A100-80GB-SXM"
  std::vector<std::string> aliases;  // e.g. "a100", "a100-80gb"
  Architecture architecture = Architecture::ampere;
  ComputeCapability compute_capability;
  int sms = 0;         // streaming multiprocessors; 0 = unknown (no wave quantization)
  core::Bytes memory;  // nominal capacity (NVIDIA's "80GB" = 80 GiB)
  core::BytesPerSecond memory_bandwidth;  // datasheet figure
  // NVLink as the datasheet gives it: total of both directions over all of the GPU's links.
  // Absent: no NVLink.
  std::optional<core::BytesPerSecond> nvlink_bandwidth_total;
  // The NVLink figure holds only between the two cards an NVLink bridge joins (PCIe boards
  // and GeForce); other GPU pairs of the node go over PCIe.
  bool nvlink_bridge_pairs_only = false;
  int pcie_generation = 0;
  core::BytesPerSecond pcie_bandwidth_total;  // x16, both directions together, as on datasheets
  // Dense peak rates (no sparsity); absent where the GPU has no unit for the format.
  // fp32 is the CUDA-core rate, the others are tensor-core rates (FP32 accumulate).
  std::optional<core::FlopsPerSecond> peak_fp32;
  std::optional<core::FlopsPerSecond> peak_tf32;
  std::optional<core::FlopsPerSecond> peak_fp16;
  std::optional<core::FlopsPerSecond> peak_bf16;
  std::optional<core::FlopsPerSecond> peak_fp8;
  std::string source;  // datasheet or whitepaper, with year and table

  // Per GPU, each direction: the unit of a scenario's `nvlink.bandwidth` (half the total).
  std::optional<core::BytesPerSecond> nvlink_bandwidth_per_direction() const;
  core::BytesPerSecond pcie_bandwidth_per_direction() const;
  // The fastest path between two GPUs of one node, each direction: NVLink when the GPU has
  // it, PCIe otherwise. What a scenario's `nvlink.bandwidth` should not exceed.
  core::BytesPerSecond intra_node_bandwidth_per_direction() const;
  // The tensor (or, for fp32, CUDA-core) unit's rate for a precision; nullopt if absent.
  std::optional<core::FlopsPerSecond> native_rate(core::Precision precision) const;
};

// The embedded catalog, parsed once. Throws std::logic_error if the embedded data is
// invalid (a build defect the tests catch, never a user error).
const std::vector<GpuSpec>& gpu_catalog();

// Finds a GPU by name or alias, ignoring case and the characters '-', '_' and ' '
// ("a100-80gb-sxm", "A100_80GB_SXM" and "a100" all work). nullptr when unknown.
const GpuSpec* find_gpu(std::string_view name);

// find_gpu() for a name that a check has already accepted (a validated scenario's cluster,
// a catalog name): throws std::logic_error naming it when it is unknown after all, instead
// of a null pointer dereferenced further on.
const GpuSpec& gpu_of(std::string_view name);

// Every catalog row a GPU name could mean: one row for a canonical name or an alias that
// pins the part; several for an alias that leaves the memory or the form factor open
// ("h100": H100-80GB-SXM or H100-80GB-PCIe; "a100-80gb": SXM or PCIe), find_gpu's row
// first. Read from the alias's own parts (chip, "<N>GB", "sxm*" or "pcie") against the rows
// of the same chip, so a row added to gpus.yaml makes its siblings' bare aliases ambiguous
// without anyone listing them. Empty when the name is unknown.
std::vector<const GpuSpec*> gpus_named(std::string_view name);

// The canonical names, in catalog order (for help texts and did-you-mean hints).
std::vector<std::string> gpu_names();

// Parses a catalog document (the format of kernels/gpus.yaml); problems go to `diags`
// with their line and key path. Rows with errors are left out.
std::vector<GpuSpec> parse_gpu_catalog(std::string_view yaml_text, const std::string& file,
                                       core::Diagnostics& diags);

// ---- precision policy --------------------------------------------------------------------
//
// Which math rate a training precision runs at on a GPU:
//  - the GPU has a unit for the format: that unit's dense peak (native);
//  - bf16, tf32 or fp16 without such a unit (bf16 and tf32 on V100 and T4): the fp32
//    CUDA-core rate, not native. Frameworks accept bf16/tf32 there but do the matmuls
//    through fp32 math (cuBLAS has no bf16 or tf32 tensor-core kernels before Ampere), so
//    the run works, at the fp32 rate; resolve_gpus warns;
//  - fp8 without fp8 tensor cores (everything before Ada and Hopper): nullopt, refused.
//    FP8 training needs the hardware (Transformer Engine will not run without it), and an
//    emulated fp8 run would be a slower, different experiment, not the one asked for.
//  - fp32 always runs at the fp32 rate (native).
struct MathRate {
  core::FlopsPerSecond rate;
  bool native = true;
  std::string
      note;  // why the rate is not native ("... bf16 runs at the fp32 rate ..."); empty if native
};
std::optional<MathRate> math_rate(const GpuSpec& gpu, core::Precision precision);

// Resolves every `clusters[i].gpu` of a scenario against the catalog and checks the
// training precision and the intra-node bandwidth against it:
//  - unknown GPU: error at clusters[i].gpu with a did-you-mean hint;
//  - precision the GPU cannot run (fp8 before Ada/Hopper): error at training.precision,
//    naming the cluster, the GPU and the precisions that would work;
//  - precision run through fp32 math: warning at training.precision saying which rate is used;
//  - a name that could mean several parts (gpus_named): warning at clusters[i].gpu naming
//    the part taken (find_gpu's) and the others;
//  - clusters[i].nvlink.bandwidth above the GPU's per-direction NVLink figure (or PCIe, for
//    GPUs without NVLink): warning, most likely a total-vs-per-direction slip.
void resolve_gpus(const core::Scenario& s, core::Diagnostics& diags);

}  // namespace hgsim::kernels
