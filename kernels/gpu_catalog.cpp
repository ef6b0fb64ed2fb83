#include "kernels/gpu_catalog.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "core/document.hpp"
#include "kernels/compute_model.hpp"

namespace hgsim::kernels {

namespace {

using core::Diagnostics;
using core::Node;
using core::Precision;

// ---- names --------------------------------------------------------------------------------

// The lookup key of a name: lower case, without '-', '_' and ' ', so that the spellings
// people type ("A100_80GB_SXM", "a100 80gb sxm") meet the catalog's.
std::string lookup_key(std::string_view name) {
  std::string key;
  key.reserve(name.size());
  for (char c : name) {
    if (c == '-' || c == '_' || c == ' ') continue;
    key.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return key;
}

const std::vector<std::string>& architecture_names() {
  static const std::vector<std::string> names{"volta", "turing", "ampere", "ada", "hopper"};
  return names;
}

// "900GB/s": GPU links are specified in bytes, so they are shown in bytes (core's human
// formatter writes network rates in bits).
std::string gigabytes_per_second(core::BytesPerSecond rate) {
  return core::shortest_decimal(rate.value() / 1e9) + "GB/s";
}

// ---- parsing one row ----------------------------------------------------------------------

template <class T>
std::optional<T> as_quantity(const Node& n, const std::string& path, Diagnostics& diags,
                             core::Parsed<T> (*parse)(std::string_view), std::string_view what) {
  if (!n.is_scalar()) {
    diags.error(n.where, path, "expected " + std::string(what) + ", found " + n.describe());
    return std::nullopt;
  }
  core::Parsed<T> parsed = parse(n.text);
  if (!parsed) diags.error(n.where, path, parsed.error);
  return parsed.value;
}

std::optional<ComputeCapability> as_compute_capability(const Node& n, const std::string& path,
                                                       Diagnostics& diags) {
  ComputeCapability cc;
  const std::string& t = n.text;
  const std::size_t dot = t.find('.');
  bool ok = n.is_scalar() && dot != std::string::npos;
  if (ok) {
    auto [p1, e1] = std::from_chars(t.data(), t.data() + dot, cc.major);
    auto [p2, e2] = std::from_chars(t.data() + dot + 1, t.data() + t.size(), cc.minor);
    ok =
        e1 == std::errc() && p1 == t.data() + dot && e2 == std::errc() && p2 == t.data() + t.size();
  }
  if (ok) return cc;
  diags.error(n.where, path, "expected a compute capability like \"8.0\", found " + n.describe());
  return std::nullopt;
}

std::vector<std::string> parse_aliases(const Node* n, const std::string& path, Diagnostics& diags) {
  std::vector<std::string> aliases;
  if (n == nullptr) return aliases;
  if (!n->is_sequence()) {
    diags.error(n->where, path, "expected a list of names, found " + n->describe());
    return aliases;
  }
  for (std::size_t i = 0; i < n->items.size(); ++i)
    if (auto alias = core::as_string(n->items[i], core::index_path(path, i), diags))
      aliases.push_back(*alias);
  return aliases;
}

void parse_nvlink(const Node* n, const std::string& path, GpuSpec& gpu, Diagnostics& diags) {
  if (n == nullptr) return;  // no NVLink
  core::Fields f(*n, path, diags);
  if (const Node* bw = f.required("bandwidth"))
    gpu.nvlink_bandwidth_total =
        as_quantity(*bw, f.path_of("bandwidth"), diags, core::parse_bandwidth, "a bandwidth");
  if (const Node* bridge = f.optional("bridge"))
    gpu.nvlink_bridge_pairs_only =
        core::as_bool(*bridge, f.path_of("bridge"), diags).value_or(false);
  f.reject_unknown();
}

void parse_pcie(const Node* n, const std::string& path, GpuSpec& gpu, Diagnostics& diags) {
  if (n == nullptr) return;  // `required` reported it
  core::Fields f(*n, path, diags);
  if (const Node* gen = f.required("generation"))
    gpu.pcie_generation = core::as_positive_count(*gen, f.path_of("generation"), diags).value_or(0);
  if (const Node* bw = f.required("bandwidth"))
    gpu.pcie_bandwidth_total =
        as_quantity(*bw, f.path_of("bandwidth"), diags, core::parse_bandwidth, "a bandwidth")
            .value_or(core::BytesPerSecond{});
  f.reject_unknown();
}

std::optional<core::FlopsPerSecond> parse_rate(const Node* n, const core::Fields& f,
                                               std::string_view key, Diagnostics& diags) {
  if (n == nullptr) return std::nullopt;
  return as_quantity(*n, f.path_of(key), diags, core::parse_compute_rate, "a compute rate");
}

void parse_peak(const Node* n, const std::string& path, GpuSpec& gpu, Diagnostics& diags) {
  if (n == nullptr) return;
  core::Fields f(*n, path, diags);
  gpu.peak_fp32 = parse_rate(f.required("fp32"), f, "fp32", diags);  // every GPU has CUDA cores
  gpu.peak_tf32 = parse_rate(f.optional("tf32"), f, "tf32", diags);
  gpu.peak_fp16 = parse_rate(f.optional("fp16"), f, "fp16", diags);
  gpu.peak_bf16 = parse_rate(f.optional("bf16"), f, "bf16", diags);
  gpu.peak_fp8 = parse_rate(f.optional("fp8"), f, "fp8", diags);
  f.reject_unknown();
}

void parse_identity(core::Fields& f, GpuSpec& gpu, Diagnostics& diags) {
  if (const Node* n = f.required("name"))
    gpu.name = core::as_string(*n, f.path_of("name"), diags).value_or("");
  gpu.aliases = parse_aliases(f.optional("aliases"), f.path_of("aliases"), diags);
  if (const Node* n = f.required("architecture")) {
    auto arch =
        core::as_choice(*n, f.path_of("architecture"), diags, architecture_names(), "architecture");
    if (arch) {
      auto pos = std::find(architecture_names().begin(), architecture_names().end(), *arch);
      gpu.architecture = static_cast<Architecture>(pos - architecture_names().begin());
    }
  }
  if (const Node* n = f.required("compute_capability"))
    gpu.compute_capability = as_compute_capability(*n, f.path_of("compute_capability"), diags)
                                 .value_or(ComputeCapability{});
  if (const Node* n = f.optional("sms"))
    gpu.sms = core::as_positive_count(*n, f.path_of("sms"), diags).value_or(0);
  if (const Node* n = f.required("source"))
    gpu.source = core::as_string(*n, f.path_of("source"), diags).value_or("");
}

void parse_memory(core::Fields& f, GpuSpec& gpu, Diagnostics& diags) {
  if (const Node* n = f.required("memory"))
    gpu.memory = as_quantity(*n, f.path_of("memory"), diags, core::parse_size, "a size")
                     .value_or(core::Bytes{});
  if (const Node* n = f.required("memory_bandwidth"))
    gpu.memory_bandwidth =
        as_quantity(*n, f.path_of("memory_bandwidth"), diags, core::parse_bandwidth, "a bandwidth")
            .value_or(core::BytesPerSecond{});
}

GpuSpec parse_row(const Node& row, const std::string& path, Diagnostics& diags) {
  GpuSpec gpu;
  core::Fields f(row, path, diags);
  if (!f.ok()) return gpu;
  parse_identity(f, gpu, diags);
  parse_memory(f, gpu, diags);
  parse_nvlink(f.optional("nvlink"), f.path_of("nvlink"), gpu, diags);
  parse_pcie(f.required("pcie"), f.path_of("pcie"), gpu, diags);
  parse_peak(f.required("peak"), f.path_of("peak"), gpu, diags);
  f.reject_unknown();
  return gpu;
}

// Every name and alias must lead to exactly one row, whatever its spelling.
void check_unique_keys(const std::vector<GpuSpec>& gpus, const std::vector<const Node*>& rows,
                       const std::string& path, Diagnostics& diags) {
  std::unordered_map<std::string, std::size_t> owner;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    std::vector<std::string> spellings = gpus[i].aliases;
    spellings.insert(spellings.begin(), gpus[i].name);
    for (const std::string& spelling : spellings) {
      auto [it, inserted] = owner.emplace(lookup_key(spelling), i);
      if (inserted || it->second == i) continue;
      diags.error(
          rows[i]->where, core::index_path(path, i),
          "'" + spelling + "' also names " + gpus[it->second].name,
          "a name or alias must lead to exactly one GPU (case, '-', '_' and ' ' are ignored)");
    }
  }
}

// ---- the embedded catalog -----------------------------------------------------------------

std::vector<GpuSpec> load_embedded_catalog() {
  Diagnostics diags;
  std::vector<GpuSpec> gpus =
      parse_gpu_catalog(embedded::gpu_catalog_yaml, "kernels/gpus.yaml", diags);
  if (diags.has_errors() || gpus.empty())
    throw std::logic_error("the embedded GPU catalog (kernels/gpus.yaml) is invalid:\n" +
                           diags.format());
  return gpus;
}

const std::unordered_map<std::string, const GpuSpec*>& lookup_index() {
  static const std::unordered_map<std::string, const GpuSpec*> index = [] {
    std::unordered_map<std::string, const GpuSpec*> map;
    for (const GpuSpec& gpu : gpu_catalog()) {
      map.emplace(lookup_key(gpu.name), &gpu);
      for (const std::string& alias : gpu.aliases) map.emplace(lookup_key(alias), &gpu);
    }
    return map;
  }();
  return index;
}

// ---- scenario checks ----------------------------------------------------------------------

const std::string kPrecisionPath = "training.precision";

// The precisions this GPU runs on tensor cores, as a hint: "use fp16 or bf16".
std::string runnable_alternatives(const GpuSpec& gpu) {
  std::string list;
  for (Precision p : {Precision::fp16, Precision::bf16}) {
    if (!gpu.native_rate(p)) continue;
    list += (list.empty() ? "" : " or ") + core::to_string(p);
  }
  if (list.empty()) list = core::to_string(Precision::fp32);
  return "use " + list + " on " + gpu.name;
}

void check_precision(const core::Scenario& s, const core::Cluster& cluster, const GpuSpec& gpu,
                     Diagnostics& diags) {
  const Precision precision = s.training.precision;
  const std::optional<MathRate> rate = math_rate(gpu, precision);
  const std::string in_cluster =
      "cluster '" + core::excerpt(cluster.name) + "' (" + gpu.name + "): ";
  if (!rate) {
    diags.error(s.where(kPrecisionPath), kPrecisionPath,
                in_cluster + core::to_string(precision) + " training needs " +
                    core::to_string(precision) + " tensor cores, which " + gpu.name +
                    " does not have",
                runnable_alternatives(gpu));
    return;
  }
  if (!rate->native)
    diags.warning(s.where(kPrecisionPath), kPrecisionPath, in_cluster + rate->note);
}

// A scenario's nvlink bandwidth is per direction; the datasheet's is the total of both. A
// value above the GPU's per-direction figure is almost always the total typed by mistake.
void check_intra_node_bandwidth(const core::Scenario& s, const std::string& cluster_path,
                                const core::Cluster& cluster, const GpuSpec& gpu,
                                Diagnostics& diags) {
  const core::BytesPerSecond limit = gpu.intra_node_bandwidth_per_direction();
  constexpr double kRoundingSlack = 1.0 + 1e-9;
  if (cluster.nvlink.bandwidth.value() <= limit.value() * kRoundingSlack) return;
  const std::string path = core::child_path(core::child_path(cluster_path, "nvlink"), "bandwidth");
  const std::string what = gpu.nvlink_bandwidth_total
                               ? gpu.name + "'s NVLink gives " + gigabytes_per_second(limit) +
                                     " per direction (the datasheet's " +
                                     gigabytes_per_second(*gpu.nvlink_bandwidth_total) +
                                     " counts both directions)"
                               : gpu.name + " has no NVLink: GPUs of a node talk over PCIe Gen" +
                                     std::to_string(gpu.pcie_generation) + " at " +
                                     gigabytes_per_second(limit) + " per direction";
  diags.warning(s.where(path), path,
                "nvlink bandwidth " + gigabytes_per_second(cluster.nvlink.bandwidth) +
                    " of cluster '" + core::excerpt(cluster.name) +
                    "' is more than the hardware has: " + what,
                "nvlink.bandwidth is per GPU and per direction; at most " +
                    gigabytes_per_second(limit) + " for " + gpu.name);
}

}  // namespace

// ---- GpuSpec ------------------------------------------------------------------------------

std::string to_string(Architecture a) {
  return architecture_names()[static_cast<std::size_t>(a)];
}

std::string ComputeCapability::to_string() const {
  return std::to_string(major) + "." + std::to_string(minor);
}

std::optional<core::BytesPerSecond> GpuSpec::nvlink_bandwidth_per_direction() const {
  if (!nvlink_bandwidth_total) return std::nullopt;
  return *nvlink_bandwidth_total / 2.0;
}

core::BytesPerSecond GpuSpec::pcie_bandwidth_per_direction() const {
  return pcie_bandwidth_total / 2.0;
}

core::BytesPerSecond GpuSpec::intra_node_bandwidth_per_direction() const {
  return nvlink_bandwidth_per_direction().value_or(pcie_bandwidth_per_direction());
}

std::optional<core::FlopsPerSecond> GpuSpec::native_rate(Precision precision) const {
  switch (precision) {
    case Precision::fp32:
      return peak_fp32;
    case Precision::tf32:
      return peak_tf32;
    case Precision::fp16:
      return peak_fp16;
    case Precision::bf16:
      return peak_bf16;
    case Precision::fp8:
      return peak_fp8;
  }
  return std::nullopt;
}

// ---- catalog ------------------------------------------------------------------------------

std::vector<GpuSpec> parse_gpu_catalog(std::string_view yaml_text, const std::string& file,
                                       Diagnostics& diags) {
  std::vector<GpuSpec> gpus;
  std::optional<Node> document = core::parse_yaml(yaml_text, file, diags);
  if (!document) return gpus;
  core::Fields top(*document, "", diags);
  const Node* list = top.required("gpus");
  top.reject_unknown();
  if (list == nullptr) return gpus;
  if (!list->is_sequence()) {
    diags.error(list->where, "gpus", "expected a list of GPUs, found " + list->describe());
    return gpus;
  }
  std::vector<const Node*> rows;
  for (std::size_t i = 0; i < list->items.size(); ++i) {
    const int errors_before = diags.error_count();
    GpuSpec gpu = parse_row(list->items[i], core::index_path("gpus", i), diags);
    if (diags.error_count() != errors_before) continue;
    gpus.push_back(std::move(gpu));
    rows.push_back(&list->items[i]);
  }
  check_unique_keys(gpus, rows, "gpus", diags);
  return gpus;
}

const std::vector<GpuSpec>& gpu_catalog() {
  static const std::vector<GpuSpec> catalog = load_embedded_catalog();
  return catalog;
}

const GpuSpec* find_gpu(std::string_view name) {
  const auto& index = lookup_index();
  auto it = index.find(lookup_key(name));
  return it == index.end() ? nullptr : it->second;
}

const GpuSpec& gpu_of(std::string_view name) {
  if (const GpuSpec* gpu = find_gpu(name)) return *gpu;
  throw std::logic_error("GPU '" + std::string(name) +
                         "' is not in the catalog, but a check accepted it (a bug in hgsim)");
}

namespace {

// "A100-80GB-SXM" -> {"A100", "80GB", "SXM"}; a row without a form factor has "" there.
struct PartName {
  std::string chip, memory, form;
};
PartName part_name(const std::string& name) {
  PartName p;
  std::stringstream in(name);
  std::getline(in, p.chip, '-');
  std::getline(in, p.memory, '-');
  std::getline(in, p.form, '-');
  return p;
}

// What an alias ("a100-sxm4", "h100-80g", "tesla-v100") says of memory and form factor;
// empty where it says nothing.
PartName alias_pins(const std::string& alias) {
  PartName pins;
  std::string spelled;  // lower case, '_' and ' ' as '-'
  for (char c : alias)
    spelled +=
        c == '_' || c == ' ' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::stringstream in(spelled);
  for (std::string token; std::getline(in, token, '-');) {
    const auto g = token.find('g');
    if (g != std::string::npos && g > 0 && token.find_first_not_of("0123456789") == g &&
        (token.substr(g) == "g" || token.substr(g) == "gb"))
      pins.memory = token.substr(0, g) + "GB";
    else if (token.rfind("sxm", 0) == 0)
      pins.form = "SXM";
    else if (token == "pcie")
      pins.form = "PCIe";
  }
  return pins;
}

}  // namespace

std::vector<const GpuSpec*> gpus_named(std::string_view name) {
  const GpuSpec* taken = find_gpu(name);
  if (taken == nullptr) return {};
  const std::string key = lookup_key(name);
  const auto alias = std::find_if(taken->aliases.begin(), taken->aliases.end(),
                                  [&](const std::string& a) { return lookup_key(a) == key; });
  if (alias == taken->aliases.end()) return {taken};  // the canonical name
  const PartName pins = alias_pins(*alias);
  const std::string chip = part_name(taken->name).chip;
  std::vector<const GpuSpec*> out{taken};
  for (const GpuSpec& gpu : gpu_catalog()) {
    const PartName part = part_name(gpu.name);
    if (&gpu == taken || part.chip != chip) continue;
    if (!pins.memory.empty() && part.memory != pins.memory) continue;
    if (!pins.form.empty() && part.form != pins.form) continue;
    out.push_back(&gpu);
  }
  return out;
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> names;
  for (const GpuSpec& gpu : gpu_catalog()) names.push_back(gpu.name);
  return names;
}

// ---- precision policy ---------------------------------------------------------------------

std::optional<MathRate> math_rate(const GpuSpec& gpu, Precision precision) {
  if (auto rate = gpu.native_rate(precision)) return MathRate{*rate, true, {}};
  // FP8 cannot be emulated into the same experiment; see the header.
  if (precision == Precision::fp8 || !gpu.peak_fp32) return std::nullopt;
  const std::string p = core::to_string(precision);
  return MathRate{*gpu.peak_fp32, false,
                  gpu.name + " has no " + p + " tensor cores: " + p + " runs at the fp32 rate " +
                      core::human_compute_rate(*gpu.peak_fp32) + " (frameworks do " + p +
                      " matmuls through fp32 math there)"};
}

namespace {

// A name that could mean several parts ("H100": SXM or PCIe) is taken as find_gpu's row,
// the SXM part with the most memory that training clusters almost always have; the warning
// says so, because the parts differ by up to 1.6x in peak rate and 2x in memory.
void check_ambiguous_name(const core::Scenario& s, const std::string& cluster_path,
                          const core::Cluster& cluster, Diagnostics& diags) {
  const std::vector<const GpuSpec*> parts = gpus_named(cluster.gpu);
  if (parts.size() < 2) return;
  std::string others;
  for (std::size_t i = 1; i < parts.size(); ++i)
    others += (i == 1 ? "" : i + 1 == parts.size() ? " or " : ", ") + parts[i]->name;
  const std::string path = core::child_path(cluster_path, "gpu");
  diags.warning(s.where(path), path,
                "'" + core::excerpt(cluster.gpu) + "' could be several GPUs: hgsim takes " +
                    parts[0]->name + ", not " + others,
                "name the part (gpu: " + parts[0]->name + ") to silence this warning");
}

// A calibration describes a GPU type (the compute model keys it by GPU): two clusters of
// one type must not calibrate it differently.
void check_calibration(const core::Scenario& s, std::size_t index, const GpuSpec& gpu,
                       Diagnostics& diags) {
  const core::Cluster& cluster = s.clusters[index];
  for (std::size_t j = 0; j < index; ++j) {
    const core::Cluster& other = s.clusters[j];
    const GpuSpec* other_gpu = find_gpu(other.gpu);
    if (other_gpu != &gpu || other.calibration == cluster.calibration) continue;
    if (cluster.calibration.empty() || other.calibration.empty()) {
      // One calibrated cluster calibrates the type: the other gets it too; say so.
      const std::size_t calibrated = cluster.calibration.empty() ? j : index;
      const std::size_t plain = calibrated == j ? index : j;
      const std::string path =
          core::child_path(core::index_path("clusters", calibrated), "calibration");
      diags.warning(s.where(path), path,
                    "the calibration of " + gpu.name + " also applies to cluster '" +
                        s.clusters[plain].name + "', which has the same GPU type");
      continue;
    }
    const std::string path = core::child_path(core::index_path("clusters", index), "calibration");
    diags.error(s.where(path), path,
                "cluster '" + core::excerpt(cluster.name) + "' calibrates " + gpu.name +
                    " differently from cluster '" + core::excerpt(other.name) + "'",
                "a calibration describes a GPU type; give it once, or the same figures");
  }
}

}  // namespace

void resolve_gpus(const core::Scenario& s, Diagnostics& diags) {
  const std::vector<std::string> names = gpu_names();
  for (std::size_t i = 0; i < s.clusters.size(); ++i) {
    const core::Cluster& cluster = s.clusters[i];
    // A missing `gpu:` key was already reported by core's scenario parser.
    if (cluster.gpu.empty()) continue;
    const std::string cluster_path = core::index_path("clusters", i);
    const GpuSpec* gpu = find_gpu(cluster.gpu);
    if (gpu == nullptr) {
      const std::string path = core::child_path(cluster_path, "gpu");
      diags.error(s.where(path), path, "unknown GPU '" + core::excerpt(cluster.gpu) + "'",
                  core::did_you_mean(cluster.gpu, names));
      continue;
    }
    check_ambiguous_name(s, cluster_path, cluster, diags);
    check_precision(s, cluster, *gpu, diags);
    check_intra_node_bandwidth(s, cluster_path, cluster, *gpu, diags);
    check_calibration(s, i, *gpu, diags);
    if (s.training.flash_version == 3 && kernel_costs_for(gpu->architecture).attention_version < 3)
      diags.error(s.where("training.flash_version"), "training.flash_version",
                  "FlashAttention-3 runs on Hopper GPUs only, but cluster '" +
                      core::excerpt(cluster.name) + "' has " + gpu->name,
                  "flash_version: 2, or leave it out for each GPU's own");
  }
}

}  // namespace hgsim::kernels
