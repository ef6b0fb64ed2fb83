// The GPU catalog: every row parses and names its source, names follow the format and
// resolve uniquely, a few published figures, the ratios each architecture implies, the
// precision policy, and the scenario check (resolve_gpus) with its positions and hints.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "core/document.hpp"
#include "core/scenario.hpp"
#include "kernels/gpu_catalog.hpp"

using namespace hgsim;
using core::Precision;
using kernels::Architecture;
using kernels::GpuSpec;

namespace {

constexpr double kTera = 1e12;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

const GpuSpec& gpu(const char* name) {
  const GpuSpec* g = kernels::find_gpu(name);
  if (g == nullptr) throw std::runtime_error(std::string("not in the catalog: ") + name);
  return *g;
}

double tflops(const std::optional<core::FlopsPerSecond>& rate) {
  return rate ? rate->value() / kTera : -1.0;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string dashes_to(std::string s, char replacement) {
  std::replace(s.begin(), s.end(), '-', replacement);
  return s;
}

// A valid two-cluster scenario. The precision is on line 6, the GPU names on lines 10 and
// 16, the first cluster's NVLink bandwidth on line 13.
constexpr std::string_view kScenarioTemplate = R"(name: gpu-catalog-test
model: llama2-7b
training:
  global_batch: 64
  seq_len: 2048
  precision: $PRECISION
  optimizer: adam
clusters:
  - name: beijing
    gpu: $GPU0
    nodes: 1
    gpus_per_node: 8
    nvlink: {bandwidth: $NVLINK0, latency: 1us}
    nic: {bandwidth: 200Gbps, latency: 2us}
  - name: shanghai
    gpu: $GPU1
    nodes: 1
    gpus_per_node: 8
    nvlink: {bandwidth: 150GB/s, latency: 1us}
    nic: {bandwidth: 100Gbps, latency: 2us}
wan:
  - between: [beijing, shanghai]
    bandwidth: 10Gbps
    latency: 15ms
strategy: auto
)";

void replace_once(std::string& text, const std::string& placeholder, const std::string& value) {
  text.replace(text.find(placeholder), placeholder.size(), value);
}

std::string scenario_text(const std::string& gpu0, const std::string& gpu1,
                          const std::string& precision, const std::string& nvlink0 = "300GB/s") {
  std::string text(kScenarioTemplate);
  replace_once(text, "$PRECISION", precision);
  replace_once(text, "$GPU0", gpu0);
  replace_once(text, "$NVLINK0", nvlink0);
  replace_once(text, "$GPU1", gpu1);
  return text;
}

core::Scenario parse(const std::string& text) {
  core::Diagnostics diags;
  std::optional<core::Node> doc = core::parse_yaml(text, "test.yaml", diags);
  EXPECT_TRUE(doc.has_value()) << diags.format();
  std::optional<core::Scenario> s = core::parse_scenario(*doc, "test.yaml", diags);
  EXPECT_TRUE(s.has_value());
  EXPECT_FALSE(diags.has_errors()) << diags.format();
  return s.value_or(core::Scenario{});
}

std::vector<core::Diagnostic> resolve(const core::Scenario& s) {
  core::Diagnostics diags;
  kernels::resolve_gpus(s, diags);
  return diags.all();
}

std::vector<core::Diagnostic> at(const std::vector<core::Diagnostic>& all,
                                 const std::string& key_path) {
  std::vector<core::Diagnostic> out;
  std::copy_if(all.begin(), all.end(), std::back_inserter(out),
               [&](const core::Diagnostic& d) { return d.key_path == key_path; });
  return out;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

// ---- the data -------------------------------------------------------------------------------

TEST(GpuCatalog, EmbeddedCatalogParsesWithoutAnyDiagnostic) {
  core::Diagnostics diags;
  auto gpus = kernels::parse_gpu_catalog(embedded::gpu_catalog_yaml, "kernels/gpus.yaml", diags);
  EXPECT_TRUE(diags.empty()) << diags.format();
  EXPECT_EQ(gpus.size(), kernels::gpu_catalog().size());
}

TEST(GpuCatalog, HoldsExactlyTheAgreedGpus) {
  const std::set<std::string> expected{
      "V100-16GB-SXM",  "V100-32GB-SXM",  "V100-32GB-PCIe", "A100-40GB-SXM",  "A100-80GB-SXM",
      "A100-40GB-PCIe", "A100-80GB-PCIe", "A800-80GB-SXM",  "A800-80GB-PCIe", "A10-24GB",
      "L4-24GB",        "L40S-48GB",      "T4-16GB",        "H100-80GB-SXM",  "H100-80GB-PCIe",
      "H800-80GB-SXM",  "H20-96GB",       "H200-141GB-SXM", "RTX3090-24GB",   "RTX4090-24GB"};
  const std::vector<std::string> names = kernels::gpu_names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), expected);
  EXPECT_EQ(names.size(), expected.size());
}

TEST(GpuCatalog, EveryRowHasASourceAndTheFiguresEveryGpuHas) {
  for (const GpuSpec& g : kernels::gpu_catalog()) {
    SCOPED_TRACE(g.name);
    EXPECT_GT(g.source.size(), 10u);
    EXPECT_GT(g.memory.value(), 0);
    EXPECT_GT(g.memory_bandwidth.value(), 0);
    EXPECT_GE(g.pcie_generation, 3);
    EXPECT_LE(g.pcie_generation, 5);
    // x16 doubles per generation: Gen3 32GB/s, Gen4 64GB/s, Gen5 128GB/s (both directions).
    EXPECT_DOUBLE_EQ(g.pcie_bandwidth_total.value(), 32e9 * (1 << (g.pcie_generation - 3)));
    EXPECT_TRUE(g.peak_fp32.has_value());
    EXPECT_TRUE(g.peak_fp16.has_value());  // every GPU here has FP16 tensor cores
    EXPECT_GT(g.compute_capability.major, 0);
  }
}

TEST(GpuCatalog, NamesFollowTheFormatAndSayTheMemory) {
  const std::regex format(R"(([A-Z][A-Z0-9]*)-([0-9]+)GB(-SXM|-PCIe)?)");
  for (const GpuSpec& g : kernels::gpu_catalog()) {
    SCOPED_TRACE(g.name);
    std::smatch m;
    ASSERT_TRUE(std::regex_match(g.name, m, format));
    // The name's "80GB" is the catalog's 80 GiB (see the memory convention in gpus.yaml).
    EXPECT_DOUBLE_EQ(g.memory.value(), std::stod(m[2].str()) * kGiB);
  }
}

TEST(GpuCatalog, ArchitectureMatchesComputeCapability) {
  for (const GpuSpec& g : kernels::gpu_catalog()) {
    SCOPED_TRACE(g.name);
    const int major = g.compute_capability.major;
    const int minor = g.compute_capability.minor;
    switch (g.architecture) {
      case Architecture::volta:
        EXPECT_EQ(g.compute_capability.to_string(), "7.0");
        break;
      case Architecture::turing:
        EXPECT_EQ(g.compute_capability.to_string(), "7.5");
        break;
      case Architecture::ampere:
        EXPECT_TRUE(major == 8 && (minor == 0 || minor == 6));
        break;
      case Architecture::ada:
        EXPECT_EQ(g.compute_capability.to_string(), "8.9");
        break;
      case Architecture::hopper:
        EXPECT_EQ(g.compute_capability.to_string(), "9.0");
        break;
    }
  }
}

// ---- lookup ---------------------------------------------------------------------------------

TEST(GpuCatalog, EveryNameAndAliasResolvesToItsOwnRowInAnySpelling) {
  for (const GpuSpec& g : kernels::gpu_catalog()) {
    std::vector<std::string> spellings = g.aliases;
    spellings.push_back(g.name);
    for (const std::string& s : spellings) {
      SCOPED_TRACE(g.name + " as '" + s + "'");
      EXPECT_EQ(kernels::find_gpu(s), &g);
      EXPECT_EQ(kernels::find_gpu(upper(s)), &g);
      EXPECT_EQ(kernels::find_gpu(dashes_to(s, '_')), &g);
      EXPECT_EQ(kernels::find_gpu(dashes_to(s, ' ')), &g);
    }
  }
}

TEST(GpuCatalog, CheckedLookupReturnsTheRowOrThrowsNamingTheGpu) {
  EXPECT_EQ(&kernels::gpu_of("v100"), kernels::find_gpu("V100-32GB-SXM"));
  for (const char* name : {"", "B300-imaginary", "east/n0"}) {
    SCOPED_TRACE(name);
    EXPECT_EQ(kernels::find_gpu(name), nullptr);
    try {
      (void)kernels::gpu_of(name);
      ADD_FAILURE() << "no exception";
    } catch (const std::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + std::string(name) + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(GpuCatalog, CommonSpellingsFindTheDocumentedRow) {
  EXPECT_EQ(kernels::find_gpu("a100-80gb-sxm")->name, "A100-80GB-SXM");
  EXPECT_EQ(kernels::find_gpu("A100_80GB_SXM")->name, "A100-80GB-SXM");
  EXPECT_EQ(kernels::find_gpu("a100")->name,
            "A100-80GB-SXM");  // bare chip: the SXM part with most memory
  EXPECT_EQ(kernels::find_gpu("a100-80g")->name, "A100-80GB-SXM");
  EXPECT_EQ(kernels::find_gpu("a100-pcie")->name, "A100-80GB-PCIe");
  EXPECT_EQ(kernels::find_gpu("v100")->name, "V100-32GB-SXM");
  EXPECT_EQ(kernels::find_gpu("h100")->name, "H100-80GB-SXM");
  EXPECT_EQ(kernels::find_gpu("h100-sxm5")->name, "H100-80GB-SXM");
  EXPECT_EQ(kernels::find_gpu("rtx-3090")->name, "RTX3090-24GB");
  EXPECT_EQ(kernels::find_gpu("3090")->name, "RTX3090-24GB");
  EXPECT_EQ(kernels::find_gpu("RTX 4090")->name, "RTX4090-24GB");
  EXPECT_EQ(kernels::find_gpu("h20")->name, "H20-96GB");
  EXPECT_EQ(kernels::find_gpu("h200")->name, "H200-141GB-SXM");
  EXPECT_EQ(kernels::find_gpu("a10")->name, "A10-24GB");
  EXPECT_EQ(kernels::find_gpu("A100-80G-SXM"), nullptr);
  EXPECT_EQ(kernels::find_gpu("B200"), nullptr);
  EXPECT_EQ(kernels::find_gpu(""), nullptr);
}

TEST(GpuCatalog, AnAliasThatNamesTwoRowsIsRejected) {
  const std::string row = R"(
    architecture: ampere
    compute_capability: "8.0"
    memory: 40GiB
    memory_bandwidth: 1555GB/s
    pcie: {generation: 4, bandwidth: 64GB/s}
    peak: {fp32: 19.5TFLOPS, fp16: 312TFLOPS}
    source: test)";
  const std::string text = "gpus:\n  - name: X1-40GB\n    aliases: [x]" + row +
                           "\n  - name: X2-40GB\n    aliases: [X]" + row + "\n";
  core::Diagnostics diags;
  kernels::parse_gpu_catalog(text, "bad.yaml", diags);
  ASSERT_EQ(diags.error_count(), 1) << diags.format();
  EXPECT_EQ(diags.all()[0].key_path, "gpus[1]");
  EXPECT_TRUE(contains(diags.all()[0].message, "X1-40GB")) << diags.all()[0].message;
}

TEST(GpuCatalog, ABrokenRowIsReportedWithItsKeyPath) {
  const std::string text = R"(gpus:
  - name: X1-40GB
    architecture: amper
    compute_capability: "8.0"
    memory: 40Gb
    memory_bandwidth: 1555GB/s
    pcie: {generation: 4, bandwidth: 64GB/s}
    peak: {fp32: 19.5TFLOPS, fp16: 312TFLOPS, fp4: 1PFLOPS}
    source: test
)";
  core::Diagnostics diags;
  auto gpus = kernels::parse_gpu_catalog(text, "bad.yaml", diags);
  EXPECT_TRUE(gpus.empty());
  std::set<std::string> paths;
  for (const auto& d : diags.all()) paths.insert(d.key_path);
  EXPECT_EQ(paths,
            (std::set<std::string>{"gpus[0].architecture", "gpus[0].memory", "gpus[0].peak.fp4"}))
      << diags.format();
}

// ---- published figures ----------------------------------------------------------------------

TEST(GpuCatalog, PublishedFigures) {
  EXPECT_DOUBLE_EQ(tflops(gpu("A100-80GB-SXM").peak_bf16), 312);
  EXPECT_DOUBLE_EQ(tflops(gpu("A100-40GB-PCIe").peak_tf32), 156);
  EXPECT_DOUBLE_EQ(tflops(gpu("H100-80GB-SXM").peak_bf16), 989.4);  // dense, whitepaper
  EXPECT_DOUBLE_EQ(tflops(gpu("V100-32GB-SXM").peak_fp16), 125);
  EXPECT_DOUBLE_EQ(tflops(gpu("V100-32GB-SXM").peak_fp32), 15.7);
  EXPECT_DOUBLE_EQ(gpu("H200-141GB-SXM").memory_bandwidth.value(), 4.8e12);
  EXPECT_DOUBLE_EQ(gpu("A100-80GB-SXM").memory_bandwidth.value(), 2039e9);
  EXPECT_DOUBLE_EQ(gpu("A100-80GB-SXM").memory.value(), 80 * kGiB);
  EXPECT_DOUBLE_EQ(tflops(gpu("L40S-48GB").peak_fp8), 733);        // dense; 1,466 is with sparsity
  EXPECT_DOUBLE_EQ(tflops(gpu("RTX4090-24GB").peak_bf16), 165.2);  // FP32 accumulate
}

TEST(GpuCatalog, NvlinkIsStoredAsTheDatasheetTotalAndServedPerDirection) {
  EXPECT_DOUBLE_EQ(gpu("A100-80GB-SXM").nvlink_bandwidth_total->value(), 600e9);
  EXPECT_DOUBLE_EQ(gpu("A100-80GB-SXM").nvlink_bandwidth_per_direction()->value(), 300e9);
  EXPECT_DOUBLE_EQ(gpu("H100-80GB-SXM").nvlink_bandwidth_per_direction()->value(), 450e9);
  EXPECT_DOUBLE_EQ(gpu("V100-32GB-SXM").nvlink_bandwidth_per_direction()->value(), 150e9);
  EXPECT_DOUBLE_EQ(gpu("A800-80GB-SXM").nvlink_bandwidth_total->value(), 400e9);
  EXPECT_DOUBLE_EQ(gpu("H800-80GB-SXM").nvlink_bandwidth_total->value(), 400e9);
  EXPECT_TRUE(gpu("RTX3090-24GB").nvlink_bridge_pairs_only);
  EXPECT_FALSE(gpu("A10-24GB").nvlink_bandwidth_total.has_value());
  EXPECT_DOUBLE_EQ(gpu("A10-24GB").intra_node_bandwidth_per_direction().value(),
                   32e9);  // PCIe Gen4
}

// ---- what each architecture implies ---------------------------------------------------------

TEST(GpuCatalog, FormatsExistExactlyWhereTheArchitectureHasTheUnit) {
  for (const GpuSpec& g : kernels::gpu_catalog()) {
    SCOPED_TRACE(g.name);
    const bool pre_ampere =
        g.architecture == Architecture::volta || g.architecture == Architecture::turing;
    const bool has_fp8_unit =
        g.architecture == Architecture::ada || g.architecture == Architecture::hopper;
    EXPECT_EQ(g.peak_tf32.has_value(), !pre_ampere);
    EXPECT_EQ(g.peak_bf16.has_value(), !pre_ampere);
    EXPECT_EQ(g.peak_fp8.has_value(), has_fp8_unit);
    if (g.peak_bf16) {
      EXPECT_DOUBLE_EQ(g.peak_bf16->value(), g.peak_fp16->value());
    }
  }
}

TEST(GpuCatalog, RatiosOfA100AndHopperTensorCores) {
  for (const GpuSpec& g : kernels::gpu_catalog()) {
    const bool ga100 = g.architecture == Architecture::ampere && g.compute_capability.minor == 0;
    const bool hopper = g.architecture == Architecture::hopper;
    if (!ga100 && !hopper) continue;
    SCOPED_TRACE(g.name);
    // Rounded datasheet figures (378 vs 756.5 / 2) stay well inside 0.1 %.
    EXPECT_NEAR(tflops(g.peak_tf32) / tflops(g.peak_bf16), 0.5, 5e-4);
    if (hopper) {
      EXPECT_NEAR(tflops(g.peak_fp8) / tflops(g.peak_bf16), 2.0, 2e-3);
    }
    // GA100 and GH100 run tensor math far above the CUDA cores (8x to 16x on these parts).
    EXPECT_GT(tflops(g.peak_bf16) / tflops(g.peak_fp32), 3.0);
  }
}

TEST(GpuCatalog, ChinaVariantsKeepTheComputeOfTheirParent) {
  for (auto [variant, parent] : {std::pair{"A800-80GB-SXM", "A100-80GB-SXM"},
                                 {"A800-80GB-PCIe", "A100-80GB-PCIe"},
                                 {"H800-80GB-SXM", "H100-80GB-SXM"}}) {
    SCOPED_TRACE(variant);
    EXPECT_EQ(gpu(variant).peak_bf16, gpu(parent).peak_bf16);
    EXPECT_EQ(gpu(variant).peak_tf32, gpu(parent).peak_tf32);
    EXPECT_EQ(gpu(variant).memory_bandwidth, gpu(parent).memory_bandwidth);
    EXPECT_LT(*gpu(variant).nvlink_bandwidth_total, *gpu(parent).nvlink_bandwidth_total);
  }
}

// ---- precision policy -----------------------------------------------------------------------

TEST(GpuCatalogPolicy, NativeFormatsRunAtTheirUnitsRate) {
  auto rate = kernels::math_rate(gpu("A100-80GB-SXM"), Precision::bf16);
  ASSERT_TRUE(rate);
  EXPECT_TRUE(rate->native);
  EXPECT_DOUBLE_EQ(rate->rate.value(), 312e12);
  EXPECT_TRUE(rate->note.empty());
  rate = kernels::math_rate(gpu("H100-80GB-SXM"), Precision::fp8);
  ASSERT_TRUE(rate);
  EXPECT_TRUE(rate->native);
  EXPECT_DOUBLE_EQ(rate->rate.value(), 1978.9e12);
  rate = kernels::math_rate(gpu("V100-32GB-SXM"), Precision::fp32);
  ASSERT_TRUE(rate);
  EXPECT_TRUE(rate->native);
  EXPECT_DOUBLE_EQ(rate->rate.value(), 15.7e12);
}

TEST(GpuCatalogPolicy, Bf16AndTf32WithoutTensorCoresRunAtTheFp32Rate) {
  for (auto [name, precision] : {std::pair{"V100-32GB-SXM", Precision::bf16},
                                 {"T4-16GB", Precision::bf16},
                                 {"V100-16GB-SXM", Precision::tf32},
                                 {"T4-16GB", Precision::tf32}}) {
    SCOPED_TRACE(std::string(name) + " " + core::to_string(precision));
    auto rate = kernels::math_rate(gpu(name), precision);
    ASSERT_TRUE(rate);
    EXPECT_FALSE(rate->native);
    EXPECT_EQ(rate->rate, *gpu(name).peak_fp32);
    EXPECT_TRUE(contains(rate->note, "fp32 rate")) << rate->note;
  }
  auto v100 = kernels::math_rate(gpu("V100-32GB-SXM"), Precision::bf16);
  EXPECT_TRUE(contains(v100->note, "15.7 TFLOPS")) << v100->note;
}

TEST(GpuCatalogPolicy, Fp8WithoutFp8TensorCoresIsRefused) {
  for (const char* name :
       {"A100-80GB-SXM", "A800-80GB-SXM", "A10-24GB", "RTX3090-24GB", "V100-32GB-SXM", "T4-16GB"})
    EXPECT_FALSE(kernels::math_rate(gpu(name), Precision::fp8)) << name;
  EXPECT_TRUE(kernels::math_rate(gpu("L4-24GB"), Precision::fp8));
  EXPECT_TRUE(kernels::math_rate(gpu("RTX4090-24GB"), Precision::fp8));
}

// ---- resolve_gpus ---------------------------------------------------------------------------

TEST(GpuCatalogResolve, KnownGpusAndASupportedPrecisionGiveNoDiagnostic) {
  auto all = resolve(parse(scenario_text("A100-80GB-SXM", "v100-32gb-sxm", "fp16")));
  for (const auto& d : all) ADD_FAILURE() << core::format_diagnostic(d);
}

TEST(GpuCatalogResolve, UnknownGpuIsAnErrorAtItsKeyWithADidYouMean) {
  auto all = resolve(parse(scenario_text("A100-80GB-SXM", "A100-80G-SXM", "fp16")));
  auto errors = at(all, "clusters[1].gpu");
  ASSERT_EQ(errors.size(), 1u);
  const core::Diagnostic& d = errors[0];
  EXPECT_EQ(d.severity, core::Severity::error);
  EXPECT_EQ(d.where.file, "test.yaml");
  EXPECT_EQ(d.where.line, 16);
  EXPECT_TRUE(contains(d.message, "A100-80G-SXM")) << d.message;
  EXPECT_TRUE(contains(d.hint, "did you mean 'A100-80GB-SXM'")) << d.hint;
  EXPECT_EQ(all.size(), 1u);  // nothing else is checked against a GPU that is not known
}

TEST(GpuCatalogResolve, Bf16OnVoltaIsAWarningThatNamesTheRateUsed) {
  auto all = resolve(parse(scenario_text("A100-80GB-SXM", "V100-32GB-SXM", "bf16")));
  ASSERT_EQ(all.size(), 1u);
  const core::Diagnostic& d = all[0];
  EXPECT_EQ(d.severity, core::Severity::warning);
  EXPECT_EQ(d.key_path, "training.precision");
  EXPECT_EQ(d.where.line, 6);
  EXPECT_TRUE(contains(d.message, "shanghai")) << d.message;
  EXPECT_TRUE(contains(d.message, "V100-32GB-SXM has no bf16 tensor cores")) << d.message;
  EXPECT_TRUE(contains(d.message, "15.7 TFLOPS")) << d.message;
}

TEST(GpuCatalogResolve, Fp8OnAmpereIsAnErrorThatSaysWhatWouldWork) {
  auto all = resolve(parse(scenario_text("H100-80GB-SXM", "A100-80GB-SXM", "fp8", "450GB/s")));
  ASSERT_EQ(all.size(), 1u);
  const core::Diagnostic& d = all[0];
  EXPECT_EQ(d.severity, core::Severity::error);
  EXPECT_EQ(d.key_path, "training.precision");
  EXPECT_TRUE(contains(d.message, "shanghai")) << d.message;
  EXPECT_TRUE(contains(d.message, "A100-80GB-SXM")) << d.message;
  EXPECT_TRUE(contains(d.hint, "use fp16 or bf16")) << d.hint;
}

TEST(GpuCatalogResolve, Fp8OnVoltaSuggestsOnlyWhatVoltaHas) {
  auto all = resolve(parse(scenario_text("H100-80GB-SXM", "V100-32GB-SXM", "fp8", "450GB/s")));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_TRUE(contains(all[0].hint, "use fp16 on V100-32GB-SXM")) << all[0].hint;
}

TEST(GpuCatalogResolve, NvlinkAboveThePerDirectionFigureIsAWarning) {
  // 600GB/s is the A100's datasheet total; per direction it is 300GB/s.
  auto all = resolve(parse(scenario_text("A100-80GB-SXM", "V100-32GB-SXM", "fp16", "600GB/s")));
  ASSERT_EQ(all.size(), 1u);
  const core::Diagnostic& d = all[0];
  EXPECT_EQ(d.severity, core::Severity::warning);
  EXPECT_EQ(d.key_path, "clusters[0].nvlink.bandwidth");
  EXPECT_EQ(d.where.line, 13);
  EXPECT_TRUE(contains(d.message, "300GB/s")) << d.message;
  EXPECT_TRUE(contains(d.hint, "per direction")) << d.hint;
}

TEST(GpuCatalogResolve, GpusWithoutNvlinkAreCheckedAgainstPcie) {
  auto all = resolve(parse(scenario_text("A10-24GB", "V100-32GB-SXM", "fp16", "64GB/s")));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].key_path, "clusters[0].nvlink.bandwidth");
  EXPECT_TRUE(contains(all[0].message, "no NVLink")) << all[0].message;
  EXPECT_TRUE(resolve(parse(scenario_text("A10-24GB", "V100-32GB-SXM", "fp16", "32GB/s"))).empty());
}

TEST(GpuCatalogResolve, ExampleScenariosResolveWithoutErrors) {
  for (const char* file : {"two-clusters.yaml", "explicit-plan.yaml", "inline-model.yaml",
                           "four-regions-sweep.yaml"}) {
    SCOPED_TRACE(file);
    core::Diagnostics load;
    auto s =
        core::load_scenario(std::string(HGSIM_SOURCE_DIR) + "/scenarios/examples/" + file, load);
    ASSERT_TRUE(s.has_value()) << load.format();
    core::Diagnostics diags;
    kernels::resolve_gpus(*s, diags);
    EXPECT_TRUE(diags.empty()) << diags.format();
  }
}

// A name that leaves the form factor or the memory open names every part it could be,
// the one taken first; a name that pins the part names one. The sets below are read off
// kernels/gpus.yaml by hand.
TEST(GpuCatalogResolve, AmbiguousNamesListEveryPartTheyCouldBe) {
  auto names = [](const char* name) {
    std::vector<std::string> out;
    for (const kernels::GpuSpec* g : kernels::gpus_named(name)) out.push_back(g->name);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names("H100"), (V{"H100-80GB-SXM", "H100-80GB-PCIe"}));
  EXPECT_EQ(names("h100-80gb"), (V{"H100-80GB-SXM", "H100-80GB-PCIe"}));
  EXPECT_EQ(names("a100"),
            (V{"A100-80GB-SXM", "A100-40GB-SXM", "A100-40GB-PCIe", "A100-80GB-PCIe"}));
  EXPECT_EQ(names("A100 SXM4"), (V{"A100-80GB-SXM", "A100-40GB-SXM"}));
  EXPECT_EQ(names("a100-80g"), (V{"A100-80GB-SXM", "A100-80GB-PCIe"}));
  EXPECT_EQ(names("a100-pcie"), (V{"A100-80GB-PCIe", "A100-40GB-PCIe"}));
  EXPECT_EQ(names("v100"), (V{"V100-32GB-SXM", "V100-16GB-SXM", "V100-32GB-PCIe"}));
  EXPECT_EQ(names("a800"), (V{"A800-80GB-SXM", "A800-80GB-PCIe"}));
  for (const char* one : {"h100-sxm5", "h100-pcie", "v100-16gb", "a10", "3090", "h200", "h20",
                          "a100-40gb-pcie", "H100_80GB_SXM"})
    EXPECT_EQ(names(one).size(), 1u) << one;
  for (const auto& gpu : kernels::gpu_catalog())
    EXPECT_EQ(names(gpu.name.c_str()), V{gpu.name}) << gpu.name;
  EXPECT_TRUE(names("B300-imaginary").empty());
}

TEST(GpuCatalogResolve, AnAmbiguousNameIsAWarningNamingThePartTakenAndTheOthers) {
  auto all = resolve(parse(scenario_text("H100", "V100-32GB-SXM", "fp16", "450GB/s")));
  auto warnings = at(all, "clusters[0].gpu");
  ASSERT_EQ(warnings.size(), 1u) << all.size();
  const core::Diagnostic& d = warnings[0];
  EXPECT_EQ(d.severity, core::Severity::warning);
  EXPECT_EQ(d.message,
            "'H100' could be several GPUs: hgsim takes H100-80GB-SXM, not H100-80GB-PCIe");
  EXPECT_TRUE(contains(d.hint, "gpu: H100-80GB-SXM")) << d.hint;
  EXPECT_TRUE(at(resolve(parse(scenario_text("h100-sxm5", "V100-32GB-SXM", "fp16", "450GB/s"))),
                 "clusters[0].gpu")
                  .empty());
}

// Every shipped scenario names its GPUs by a name that pins the part.
TEST(GpuCatalogResolve, ShippedScenariosNameUnambiguousGpus) {
  std::size_t scenarios = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(
           std::string(HGSIM_SOURCE_DIR) + "/scenarios")) {
    if (entry.path().extension() != ".yaml") continue;
    core::Diagnostics load;
    auto s = core::load_scenario(entry.path().string(), load);
    if (!s) continue;  // not a scenario (traces, profiles) or a deliberately broken one
    ++scenarios;
    for (const auto& cluster : s->clusters)
      EXPECT_LE(kernels::gpus_named(cluster.gpu).size(), 1u) << entry.path() << ": " << cluster.gpu;
  }
  EXPECT_GT(scenarios, 20u);
}

// ---- CUDA devices on this machine ---------------------------------------------------------

#include "kernels/cuda_devices.hpp"

TEST(LocalCuda, VisibleDevicesMatchTheCatalog) {
  std::string why;
  auto devices = hgsim::kernels::local_cuda_devices(&why);
  if (devices.empty()) GTEST_SKIP() << "no CUDA device: " << why;
  for (const auto& d : devices) {
    EXPECT_GT(d.memory.value(), 1e9) << d.name;
    EXPECT_GE(d.compute_capability_major, 7) << d.name;
    EXPECT_GT(d.multiprocessors, 0) << d.name;
  }
}
