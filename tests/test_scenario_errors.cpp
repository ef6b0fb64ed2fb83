// Broken scenarios: each case changes one thing in a valid scenario and asserts that the
// problem is reported at the right line with the right key path, and that the hint says
// what would be valid.
#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include <gtest/gtest.h>

#include "apps/validate.hpp"

namespace {

// A valid scenario; the line numbers in the cases below refer to it.
const char* const kBase =
    "name: t\n"                                                             // 1
    "model: llama2-7b\n"                                                    // 2
    "training:\n"                                                           // 3
    "  global_batch: 256\n"                                                 // 4
    "  seq_len: 4096\n"                                                     // 5
    "  precision: fp16\n"                                                   // 6
    "  optimizer: adam\n"                                                   // 7
    "  recompute: selective\n"                                              // 8
    "clusters:\n"                                                           // 9
    "  - name: beijing\n"                                                   // 10
    "    gpu: A100-80GB-SXM\n"                                              // 11
    "    nodes: 2\n"                                                        // 12
    "    gpus_per_node: 8\n"                                                // 13
    "    nvlink: {bandwidth: 300GB/s, latency: 1us}\n"                      // 14
    "    nic: {bandwidth: 200Gbps, latency: 2us}\n"                         // 15
    "  - name: shanghai\n"                                                  // 16
    "    gpu: V100-32GB-SXM\n"                                              // 17
    "    nodes: 3\n"                                                        // 18
    "    gpus_per_node: 8\n"                                                // 19
    "    nvlink: {bandwidth: 150GB/s, latency: 1us}\n"                      // 20
    "    nic: {bandwidth: 100Gbps, latency: 2us}\n"                         // 21
    "wan:\n"                                                                // 22
    "  - between: [beijing, shanghai]\n"                                    // 23
    "    bandwidth: 10Gbps\n"                                               // 24
    "    latency: 15ms\n"                                                   // 25
    "strategy:\n"                                                           // 26
    "  schedule: 1f1b\n"                                                    // 27
    "  micro_batch: 1\n"                                                    // 28
    "  pipelines:\n"                                                        // 29
    "    - replicas: 2\n"                                                   // 30
    "      micro_batches: 128\n"                                            // 31
    "      stages:\n"                                                       // 32
    "        - {cluster: beijing, tp: 8, layers: 20}\n"                     // 33
    "        - {cluster: shanghai, tp: 8, layers: 12}\n"                    // 34
    "  grad_sync: {algorithm: hierarchical, bucket: 25MB}\n"                // 35
    "compression:\n"                                                        // 36
    "  wan_activations: int8\n"                                             // 37
    "  wan_gradients: {codec: topk, ratio: 0.01, error_feedback: true}\n";  // 38

struct Case {
  const char* name;
  const char* from;     // text of kBase to replace (must occur)
  const char* to;       // its replacement
  const char* key;      // the key path the error must name
  int line;             // the line it must be reported at
  const char* message;  // a part of the message or the hint
};

// Names the case in test output instead of dumping its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class ScenarioFile {
 public:
  explicit ScenarioFile(const std::string& text) {
    // ctest runs tests as parallel processes: the directory is unique per process and file.
    dir_ = std::filesystem::temp_directory_path() /
           ("hgsim-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "scenario.yaml").string();
    std::ofstream(path_) << text;
  }
  ~ScenarioFile() { std::filesystem::remove_all(dir_); }
  const std::string& path() const { return path_; }
  std::filesystem::path dir() const { return dir_; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path dir_;
  std::string path_;
};

std::string replaced(const std::string& text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "case text not in the base scenario: " << from;
  if (at == std::string::npos) return text;
  return text.substr(0, at) + to + text.substr(at + from.size());
}

hgsim::core::Diagnostics check_text(const std::string& text) {
  ScenarioFile file(text);
  hgsim::core::Diagnostics diags;
  hgsim::apps::check_scenario_file(file.path(), diags);
  return diags;
}

const hgsim::core::Diagnostic* find_error(const hgsim::core::Diagnostics& diags,
                                          const std::string& key) {
  for (const auto& d : diags.all())
    if (d.severity == hgsim::core::Severity::error && d.key_path == key) return &d;
  return nullptr;
}

const Case kCases[] = {
    {"GradientsInFp8", "  optimizer: adam\n", "  optimizer: adam\n  grad_dtype: fp8\n",
     "training.grad_dtype", 8, "fp32, bf16 or fp16"},
    {"OptimizerStateInFp16", "  optimizer: adam\n", "  optimizer: adam\n  optimizer_state: fp16\n",
     "training.optimizer_state", 8, "fp32 or bf16"},
    {"Bf16StateUnderFp32Training", "  precision: fp16\n  optimizer: adam\n",
     "  precision: fp32\n  optimizer: adam\n  optimizer_state: bf16\n", "training.optimizer_state",
     8, "needs 16-bit training"},
    {"UnknownGpu", "gpu: A100-80GB-SXM", "gpu: A100-80GB-SMX", "clusters[0].gpu", 11,
     "did you mean 'A100-80GB-SXM'"},
    {"BandwidthWithoutPerSecond", "{bandwidth: 100Gbps, latency: 2us}",
     "{bandwidth: 100Gb, latency: 2us}", "clusters[1].nic.bandwidth", 21, "/s"},
    {"NumberWithoutUnit", "bandwidth: 10Gbps", "bandwidth: 10", "wan[0].bandwidth", 24, "no unit"},
    {"SizeWhereDurationExpected", "latency: 15ms", "latency: 15MB", "wan[0].latency", 25,
     "is a size"},
    {"RateWhereSizeExpected", "bucket: 25MB", "bucket: 25MB/s", "strategy.grad_sync.bucket", 35,
     "is a bandwidth"},
    {"UnknownUnit", "{bandwidth: 300GB/s, latency: 1us}", "{bandwidth: 300GB/s, latency: 1uss}",
     "clusters[0].nvlink.latency", 14, "unknown unit"},
    {"ZeroNodes", "nodes: 3", "nodes: 0", "clusters[1].nodes", 18, "at least 1"},
    {"NegativeBatch", "global_batch: 256", "global_batch: -4", "training.global_batch", 4,
     "at least 1"},
    {"WrongTypeText", "global_batch: 256", "global_batch: many", "training.global_batch", 4,
     "whole number"},
    {"WrongTypeList", "nodes: 2", "nodes: [2]", "clusters[0].nodes", 12, "found a list"},
    {"FractionalCount", "micro_batch: 1", "micro_batch: 1.5", "strategy.micro_batch", 28,
     "whole number"},
    {"MissingKey", "  seq_len: 4096\n", "", "training.seq_len", 4, "missing key 'seq_len'"},
    {"UnknownTopLevelKey", "model: llama2-7b\n", "model: llama2-7b\nmodle: x\n", "modle", 3,
     "did you mean 'model'"},
    {"UnknownStageKey", "{cluster: beijing, tp: 8, layers: 20}",
     "{cluster: beijing, tp: 8, layer: 20}", "strategy.pipelines[0].stages[0].layer", 33,
     "did you mean 'layers'"},
    {"UnknownModel", "model: llama2-7b", "model: llama-7b", "model", 2, "llama2-7b"},
    {"UnknownPrecision", "precision: fp16", "precision: fp12", "training.precision", 6,
     "did you mean"},
    {"UnknownOptimizer", "optimizer: adam", "optimizer: lamb", "training.optimizer", 7, "adam"},
    {"UnknownRecompute", "recompute: selective", "recompute: partial", "training.recompute", 8,
     "selective"},
    {"UnknownSchedule", "schedule: 1f1b", "schedule: 1f1f", "strategy.schedule", 27,
     "did you mean '1f1b'"},
    {"UnknownGradSync", "algorithm: hierarchical", "algorithm: hierarchal",
     "strategy.grad_sync.algorithm", 35, "did you mean 'hierarchical'"},
    {"UnknownCodec", "wan_activations: int8", "wan_activations: int9",
     "compression.wan_activations", 37, "did you mean 'int8'"},
    {"CodecParameterOutOfRange", "ratio: 0.01", "ratio: 2", "compression.wan_gradients.ratio", 38,
     "[1e-6, 1]"},
    {"CodecUnknownParameter", "ratio: 0.01", "rank: 4", "compression.wan_gradients.rank", 38,
     "ratio"},
    {"UnknownActivation", "model: llama2-7b",
     "model: {name: x, layers: 32, hidden: 4096, heads: 32, vocab: 32000, activation: gelu2}",
     "model.activation", 2, "gelu"},
    {"WanNamesUnknownCluster", "between: [beijing, shanghai]", "between: [beijing, shanhai]",
     "wan[0].between[1]", 23, "did you mean 'shanghai'"},
    {"StageNamesUnknownCluster", "{cluster: shanghai, tp: 8, layers: 12}",
     "{cluster: shangai, tp: 8, layers: 12}", "strategy.pipelines[0].stages[1].cluster", 34,
     "did you mean 'shanghai'"},
    {"DuplicateClusterName", "  - name: shanghai", "  - name: beijing", "clusters[1].name", 16,
     "unique"},
    {"TpLargerThanNodeButNotWholeNodes", "{cluster: shanghai, tp: 8, layers: 12}",
     "{cluster: shanghai, tp: 12, layers: 12}", "strategy.pipelines[0].stages[1].tp", 34,
     "not a whole number of nodes"},
    {"TpNotDividingHeads", "{cluster: beijing, tp: 8, layers: 20}",
     "{cluster: beijing, tp: 6, layers: 20}", "strategy.pipelines[0].stages[0].tp", 33, "32"},
    {"HeadsNotDividingHidden", "model: llama2-7b",
     "model: {name: x, layers: 32, hidden: 4096, heads: 30, vocab: 32000}", "model.heads", 2,
     "4096"},
    {"LayersDoNotAddUp", "{cluster: shanghai, tp: 8, layers: 12}",
     "{cluster: shanghai, tp: 8, layers: 10}", "strategy.pipelines[0].stages", 33,
     "the model has 32"},
    {"GpusDoNotAddUp", "replicas: 2", "replicas: 3", "strategy.pipelines", 30, "which has 16"},
    {"BatchDoesNotAddUp", "micro_batches: 128", "micro_batches: 100", "strategy.pipelines", 30,
     "global_batch is 256"},
    {"Fp8OnGpuWithoutFp8", "precision: fp16", "precision: fp8", "training.precision", 6, "fp8"},
    {"DuplicateKey", "  seq_len: 4096\n", "  seq_len: 4096\n  seq_len: 2048\n", "training.seq_len",
     6, "duplicate"},
    {"StrategyNeitherAutoNorPlan", "strategy:\n", "strategy: automatic\nunused:\n", "strategy", 26,
     "'auto'"},
    {"VirtualStagesWithoutInterleaved", "  micro_batch: 1\n",
     "  micro_batch: 1\n  virtual_stages: 2\n", "strategy.virtual_stages", 29, "interleaved"},
    {"DpNotDividingMicroBatch", "{cluster: shanghai, tp: 8, layers: 12}",
     "{cluster: shanghai, tp: 4, dp: 2, layers: 12}", "strategy.pipelines[0].stages[1].dp", 34,
     "divides"},
    {"SweepValueWithBadUnit", "error_feedback: true}\n",
     "error_feedback: true}\nsweep:\n  wan[*].bandwidth: [1Gbps, 10Gbsp]\n", "wan[0].bandwidth", 40,
     "unknown unit"},
    {"SweepPathTypo", "error_feedback: true}\n",
     "error_feedback: true}\nsweep:\n  wan[*].bandwith: [1Gbps]\n", "wan[0].bandwith", 40,
     "did you mean 'bandwidth'"},
    {"SweepIndexOutOfRange", "error_feedback: true}\n",
     "error_feedback: true}\nsweep:\n  clusters[5].nodes: [1]\n", "sweep.clusters[5].nodes", 40,
     "no [5]"},
    {"MissingTrace", "    latency: 15ms\n", "    latency: 15ms\n    trace: no-such-trace.csv\n",
     "wan[0].trace", 26, "cannot open"},
};

class BrokenScenario : public ::testing::TestWithParam<Case> {};

TEST_P(BrokenScenario, IsReportedAtItsLineAndKey) {
  const Case& c = GetParam();
  auto diags = check_text(replaced(kBase, c.from, c.to));
  ASSERT_TRUE(diags.has_errors()) << "accepted: " << c.name;
  const auto* d = find_error(diags, c.key);
  ASSERT_NE(d, nullptr) << "no error at key " << c.key << "; got:\n" << diags.format();
  EXPECT_EQ(d->where.line, c.line) << diags.format();
  EXPECT_GT(d->where.column, 0);
  std::string text = d->message + "; " + d->hint;
  EXPECT_NE(text.find(c.message), std::string::npos) << "'" << c.message << "' not in: " << text;
}

INSTANTIATE_TEST_SUITE_P(Cases, BrokenScenario, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ScenarioErrors, TheBaseScenarioIsValid) {
  auto diags = check_text(kBase);
  EXPECT_FALSE(diags.has_errors()) << diags.format();
}

// A document that parses with errors (a duplicate key) gives no checked points, even when
// the scenario built from it would be valid.
TEST(ScenarioErrors, DuplicateKeysMakeTheFileInvalid) {
  ScenarioFile file(replaced(kBase, "  seq_len: 4096\n", "  seq_len: 4096\n  seq_len: 4096\n"));
  hgsim::core::Diagnostics diags;
  const auto points = hgsim::apps::check_scenario_file(file.path(), diags);
  EXPECT_FALSE(points.has_value());
  EXPECT_TRUE(diags.has_errors()) << diags.format();
}

TEST(ScenarioErrors, AllProblemsAreReportedAtOnce) {
  std::string text = replaced(kBase, "gpu: A100-80GB-SXM", "gpu: A100-80GB-SMX");
  text = replaced(text, "bandwidth: 10Gbps", "bandwidth: 10");
  text = replaced(text, "schedule: 1f1b", "schedule: 1f1f");
  text = replaced(text, "wan_activations: int8", "wan_activations: int9");
  auto diags = check_text(text);
  EXPECT_NE(find_error(diags, "clusters[0].gpu"), nullptr) << diags.format();
  EXPECT_NE(find_error(diags, "wan[0].bandwidth"), nullptr) << diags.format();
  EXPECT_NE(find_error(diags, "strategy.schedule"), nullptr) << diags.format();
  EXPECT_NE(find_error(diags, "compression.wan_activations"), nullptr) << diags.format();
  EXPECT_EQ(diags.error_count(), 4) << diags.format();
}

TEST(ScenarioErrors, Bf16OnV100WarnsAndNamesTheRateUsed) {
  auto diags = check_text(replaced(kBase, "precision: fp16", "precision: bf16"));
  EXPECT_FALSE(diags.has_errors()) << diags.format();
  bool warned = false;
  for (const auto& d : diags.all())
    if (d.severity == hgsim::core::Severity::warning && d.key_path == "training.precision") {
      warned = true;
      EXPECT_EQ(d.where.line, 6);
      EXPECT_NE((d.message + d.hint).find("fp32"), std::string::npos) << d.message;
    }
  EXPECT_TRUE(warned) << diags.format();
}

TEST(ScenarioErrors, IdleGpusAreAWarningNotAnError) {
  // shanghai has 24 GPUs and the plan uses 16 of them.
  auto diags = check_text(kBase);
  EXPECT_FALSE(diags.has_errors()) << diags.format();
  bool idle = false;
  for (const auto& d : diags.all())
    idle = idle || d.message.find("16 of the 24 GPUs") != std::string::npos;
  EXPECT_TRUE(idle) << diags.format();
}

TEST(ScenarioErrors, SweepErrorIsReportedOnceNotPerPoint) {
  std::string text = replaced(kBase, "error_feedback: true}\n",
                              "error_feedback: true}\nsweep:\n  wan[*].bandwidth: [1Gbps, 10Gbsp]\n"
                              "  compression.wan_activations: [none, int8, int4]\n");
  auto diags = check_text(text);
  int count = 0;
  for (const auto& d : diags.all()) count += d.key_path == "wan[0].bandwidth";
  EXPECT_EQ(count, 1) << diags.format();
}

TEST(ScenarioErrors, TraceRowsAreCheckedWithTheirCsvLine) {
  ScenarioFile file(
      replaced(kBase, "    latency: 15ms\n", "    latency: 15ms\n    trace: bw.csv\n"));
  std::ofstream(file.dir() / "bw.csv") << "# time_s,bandwidth\n0,2Gbps\n30,1Gb\n0,2Gbps\n";
  hgsim::core::Diagnostics diags;
  hgsim::apps::check_scenario_file(file.path(), diags);
  std::vector<int> lines;
  for (const auto& d : diags.all())
    if (d.key_path == "wan[0].trace") {
      lines.push_back(d.where.line);
      EXPECT_NE(d.where.file.find("bw.csv"), std::string::npos);
    }
  EXPECT_EQ(lines, (std::vector<int>{3, 4})) << diags.format();
}

TEST(ScenarioErrors, NotYamlAtAll) {
  auto diags = check_text(
      replaced(kBase, "{bandwidth: 300GB/s, latency: 1us}", "{bandwidth: 300GB/s, latency: 1us"));
  ASSERT_TRUE(diags.has_errors());
  EXPECT_GT(diags.all().front().where.line, 0);
  EXPECT_NE(diags.all().front().message.find("not valid YAML"), std::string::npos);
}

TEST(ScenarioErrors, MissingFile) {
  hgsim::core::Diagnostics diags;
  EXPECT_FALSE(hgsim::apps::check_scenario_file("/nonexistent/scenario.yaml", diags));
  EXPECT_NE(diags.format().find("cannot open"), std::string::npos);
}

}  // namespace

namespace {

// Random damage to a valid scenario (a byte changed, a line dropped or doubled) must give
// an answer, never a crash or a hang: either the file is still valid, or at least one
// error is reported. Run under the debug preset this also checks memory safety.
TEST(ScenarioErrors, RandomDamageNeverCrashes) {
  const unsigned seed = std::random_device{}();
  std::mt19937 rng(seed);
  const std::string alphabet = " :-[]{},#'\"0123456789abcxyzGMBps/.\n\t";
  for (int round = 0; round < 300; ++round) {
    std::string text = kBase;
    switch (rng() % 3) {
      case 0:
        text[rng() % text.size()] = alphabet[rng() % alphabet.size()];
        break;
      case 1: {
        std::size_t at = text.find('\n', rng() % text.size());
        std::size_t begin = text.rfind('\n', at == std::string::npos ? text.size() - 1 : at - 1);
        begin = begin == std::string::npos ? 0 : begin + 1;
        if (at != std::string::npos) text.erase(begin, at - begin + 1);
        break;
      }
      default: {
        std::size_t at = text.find('\n', rng() % text.size());
        std::size_t begin = text.rfind('\n', at == std::string::npos ? text.size() - 1 : at - 1);
        begin = begin == std::string::npos ? 0 : begin + 1;
        if (at != std::string::npos) text.insert(begin, text.substr(begin, at - begin + 1));
      }
    }
    ScenarioFile file(text);
    hgsim::core::Diagnostics diags;
    auto points = hgsim::apps::check_scenario_file(file.path(), diags);
    ASSERT_EQ(points.has_value(), !diags.has_errors()) << "seed " << seed << "\n"
                                                       << text << diags.format();
  }
}

}  // namespace
