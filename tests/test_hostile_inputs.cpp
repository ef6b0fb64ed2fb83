// Hostile and mistaken input: every case feeds one damaged scenario, plan,
// trace, codec buffer or special file and asserts where the problem is reported
// (file:line:column or key path) and what is said, and that it is an input error (exit 1),
// never a crash, a hang, an internal error or unbounded memory. The process-level cases
// (signals, write errors, limits set in the environment) run the hgsim binary itself.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/resource.h>

#include "apps/commands.hpp"
#include "apps/results_db.hpp"
#include "apps/sweep_command.hpp"
#include "apps/validate.hpp"
#include "compress/codec.hpp"
#include "core/document.hpp"
#include "core/files.hpp"
#include "core/limits.hpp"
#include "core/process.hpp"
#include "core/scenario.hpp"

namespace {

namespace fs = std::filesystem;
using namespace hgsim;

// A valid scenario (two clusters, an explicit plan); line numbers below refer to it.
const std::string kBase =
    "name: t\n"                                                             // 1
    "model: {name: tiny, layers: 4, hidden: 256, heads: 4, vocab: 1000}\n"  // 2
    "training:\n"                                                           // 3
    "  global_batch: 8\n"                                                   // 4
    "  seq_len: 128\n"                                                      // 5
    "  precision: bf16\n"                                                   // 6
    "clusters:\n"                                                           // 7
    "  - name: east\n"                                                      // 8
    "    gpu: A100-80GB-SXM\n"                                              // 9
    "    nodes: 1\n"                                                        // 10
    "    gpus_per_node: 2\n"                                                // 11
    "    nvlink: {bandwidth: 300GB/s, latency: 1us}\n"                      // 12
    "    nic: {bandwidth: 200Gbps, latency: 2us}\n"                         // 13
    "  - name: west\n"                                                      // 14
    "    gpu: V100-32GB-SXM\n"                                              // 15
    "    nodes: 1\n"                                                        // 16
    "    gpus_per_node: 2\n"                                                // 17
    "    nvlink: {bandwidth: 150GB/s, latency: 1us}\n"                      // 18
    "    nic: {bandwidth: 100Gbps, latency: 2us}\n"                         // 19
    "wan:\n"                                                                // 20
    "  - between: [east, west]\n"                                           // 21
    "    bandwidth: 10Gbps\n"                                               // 22
    "    latency: 15ms\n"                                                   // 23
    "strategy:\n"                                                           // 24
    "  schedule: 1f1b\n"                                                    // 25
    "  micro_batch: 1\n"                                                    // 26
    "  pipelines:\n"                                                        // 27
    "    - replicas: 2\n"                                                   // 28
    "      micro_batches: 4\n"                                              // 29
    "      stages:\n"                                                       // 30
    "        - {cluster: east, tp: 1, layers: 2}\n"                         // 31
    "        - {cluster: west, tp: 1, layers: 2}\n"                         // 32
    "  grad_sync: {algorithm: ring, bucket: 25MB}\n";                       // 33

// A folder of its own per test process and case (ctest runs tests in parallel).
class TempDir {
 public:
  TempDir() {
    dir_ = fs::temp_directory_path() /
           ("hgsim-hostile-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::string write(const std::string& name, const std::string& text) const {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << text;
    return p.string();
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  const fs::path& dir() const { return dir_; }

 private:
  static inline int counter_ = 0;
  fs::path dir_;
};

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "not in the base scenario: " << from;
  if (at == std::string::npos) return text;
  return text.replace(at, from.size(), to);
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

struct CliResult {
  int status;
  std::string out;
  std::string err;
};

CliResult cli(std::vector<std::string> words) {
  words.insert(words.begin(), "hgsim");
  std::vector<const char*> args;
  for (const auto& w : words) args.push_back(w.c_str());
  std::ostringstream out, err;
  const int status = apps::run_cli(static_cast<int>(args.size()), args.data(), out, err);
  return {status, out.str(), err.str()};
}

// ---- scenarios: one change to kBase each ----------------------------------------------

struct ScenarioCase {
  const char* name;
  std::vector<std::pair<std::string, std::string>> changes;  // (text of kBase, replacement)
  std::string key;      // the key path the first error names ("" for the whole document)
  int line;             // its line in the scenario (0: any)
  int column;           // its column (0: any)
  std::string message;  // a part of its message or hint
};

void PrintTo(const ScenarioCase& c, std::ostream* os) {
  *os << c.name;
}

const std::string kBomb =  // 10^7 values from a few hundred bytes
    "name: t\n"
    "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    "b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n"
    "d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n"
    "f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n"
    "g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n";

const std::string kSweep3x30 = "sweep:\n  training.global_batch: [" + repeat("8, ", 29) +
                               "8]\n  training.seq_len: [" + repeat("128, ", 29) +
                               "128]\n  wan[0].latency: [" + repeat("1ms, ", 29) + "1ms]\n";

const ScenarioCase kScenarioCases[] = {
    // empty and unusable names
    {"EmptyScenarioName", {{"name: t\n", "name: ''\n"}}, "name", 1, 7, "may not be empty"},
    {"EmptyGpu", {{"gpu: A100-80GB-SXM", "gpu: ''"}}, "clusters[0].gpu", 9, 10, "may not be empty"},
    {"EmptyClusterName", {{"- name: east", "- name: \"\""}}, "clusters[0].name", 8, 11, "empty"},
    {"EmptyStageCluster",
     {{"{cluster: east, tp: 1, layers: 2}", "{cluster: '', tp: 1, layers: 2}"}},
     "strategy.pipelines[0].stages[0].cluster",
     31,
     21,
     "may not be empty"},
    {"EmptyModelName", {{"{name: tiny,", "{name: '',"}}, "model.name", 2, 15, "may not be empty"},
    {"ClusterNamedLikeAGeneratedZone",
     {{"- name: west", "- name: east/n0"}},
     "clusters[1].name",
     14,
     11,
     "'east/n0'"},
    {"ClusterNameWithQuote",
     {{"- name: west", "- name: 'we\"st'"}},
     "clusters[1].name",
     14,
     11,
     "letters, digits"},
    {"ClusterNameWithSpace",
     {{"- name: west", "- name: 'we st'"}},
     "clusters[1].name",
     14,
     11,
     "letters, digits"},
    {"ClusterNameWithColon",
     {{"- name: west", "- name: 'wan:x'"}},
     "clusters[1].name",
     14,
     11,
     "letters, digits"},
    {"ClusterNameWithAngle",
     {{"- name: west", "- name: 'a->b'"}},
     "clusters[1].name",
     14,
     11,
     "letters, digits"},
    {"ClusterNameStartsWithDot",
     {{"- name: west", "- name: .west"}},
     "clusters[1].name",
     14,
     11,
     "starting with a letter"},
    {"ClusterNameTooLong",
     {{"- name: west", "- name: " + repeat("w", 65)}},
     "clusters[1].name",
     14,
     11,
     "at most 64"},
    {"NameTooLong",
     {{"name: t\n", "name: " + repeat("n", 201) + "\n"}},
     "name",
     1,
     7,
     "at most 200"},
    {"GpuAsList",
     {{"gpu: A100-80GB-SXM", "gpu: [a, b]"}},
     "clusters[0].gpu",
     9,
     10,
     "expected a name"},
    // extreme and absurd quantities
    {"BandwidthOverflowsToInfinity",
     {{"bandwidth: 10Gbps", "bandwidth: 1e300Tbps"}},
     "wan[0].bandwidth",
     22,
     16,
     "outside the range"},
    {"BandwidthBelowAnyLink",
     {{"bandwidth: 10Gbps", "bandwidth: 1e-300bps"}},
     "wan[0].bandwidth",
     22,
     16,
     "outside the range"},
    {"BandwidthNotADouble",
     {{"bandwidth: 10Gbps", "bandwidth: 1e400Gbps"}},
     "wan[0].bandwidth",
     22,
     16,
     "too large or too small"},
    {"BandwidthInfinity",
     {{"bandwidth: 10Gbps", "bandwidth: infGbps"}},
     "wan[0].bandwidth",
     22,
     16,
     "does not start with a number"},
    {"BandwidthNan",
     {{"bandwidth: 10Gbps", "bandwidth: nanGbps"}},
     "wan[0].bandwidth",
     22,
     16,
     "does not start with a number"},
    {"BandwidthNegative",
     {{"bandwidth: 10Gbps", "bandwidth: -10Gbps"}},
     "wan[0].bandwidth",
     22,
     16,
     "positive"},
    {"BandwidthZero",
     {{"bandwidth: 10Gbps", "bandwidth: 0Gbps"}},
     "wan[0].bandwidth",
     22,
     16,
     "positive"},
    {"BandwidthEmpty",
     {{"bandwidth: 10Gbps", "bandwidth: ''"}},
     "wan[0].bandwidth",
     22,
     16,
     "empty value"},
    {"NvlinkFasterThanLight",
     {{"300GB/s", "9e99TB/s"}},
     "clusters[0].nvlink.bandwidth",
     12,
     25,
     "outside the range"},
    {"LatencyOfYears",
     {{"latency: 15ms", "latency: 1e9s"}},
     "wan[0].latency",
     23,
     14,
     "outside the range"},
    {"LatencyNegative",
     {{"latency: 15ms", "latency: -15ms"}},
     "wan[0].latency",
     23,
     14,
     "zero or positive"},
    {"LatencyNotADouble",
     {{"latency: 15ms", "latency: 1e999ms"}},
     "wan[0].latency",
     23,
     14,
     "too large or too small"},
    {"BucketOfZettabytes",
     {{"bucket: 25MB", "bucket: 1e30TB"}},
     "strategy.grad_sync.bucket",
     33,
     40,
     "outside the range"},
    {"TcpWindowNotADouble",
     {{"    latency: 15ms\n", "    latency: 15ms\n    tcp_window: 1e400MB\n"}},
     "wan[0].tcp_window",
     24,
     17,
     "too large or too small"},
    {"OversubscriptionInfinity",
     {{"latency: 2us}\n  - name: west",
       "latency: 2us}\n    oversubscription: .inf\n  - name: west"}},
     "clusters[0].oversubscription",
     14,
     23,
     "expected a number"},
    {"OversubscriptionNotADouble",
     {{"latency: 2us}\n  - name: west",
       "latency: 2us}\n    oversubscription: 1e400\n  - name: west"}},
     "clusters[0].oversubscription",
     14,
     23,
     "out of range"},
    {"OversubscriptionNan",
     {{"latency: 2us}\n  - name: west",
       "latency: 2us}\n    oversubscription: .nan\n  - name: west"}},
     "clusters[0].oversubscription",
     14,
     23,
     "expected a number"},
    {"GlobalBatchNegative",
     {{"global_batch: 8", "global_batch: -8"}},
     "training.global_batch",
     4,
     17,
     "at least 1"},
    {"GlobalBatchFraction",
     {{"global_batch: 8", "global_batch: 8.5"}},
     "training.global_batch",
     4,
     17,
     "whole number"},
    {"GlobalBatchExponent",
     {{"global_batch: 8", "global_batch: 1e400"}},
     "training.global_batch",
     4,
     17,
     "whole number"},
    {"GlobalBatchQuoted",
     {{"global_batch: 8", "global_batch: '8'"}},
     "training.global_batch",
     4,
     17,
     "whole number"},
    {"SeqLenBeyond64Bits",
     {{"seq_len: 128", "seq_len: 99999999999999999999"}},
     "training.seq_len",
     5,
     12,
     "too large"},
    {"SeqLenBeyondInt",
     {{"seq_len: 128", "seq_len: 99999999999"}},
     "training.seq_len",
     5,
     12,
     "too large"},
    // counts that multiply
    {"NodesBeyondGpuLimit",
     {{"nodes: 1\n    gpus_per_node: 2\n    nvlink: {bandwidth: 300",
       "nodes: 2147483647\n    gpus_per_node: 2\n    nvlink: {bandwidth: 300"}},
     "clusters[0].nodes",
     10,
     12,
     "HGSIM_MAX_GPUS"},
    {"NodesTimesGpusWrapsAround",
     {{"nodes: 1\n    gpus_per_node: 2\n    nvlink: {bandwidth: 300",
       "nodes: 65536\n    gpus_per_node: 65537\n    nvlink: {bandwidth: 300"}},
     "clusters[0].nodes",
     10,
     12,
     "65536 x 65537"},
    {"ReplicasBeyondInt",
     {{"replicas: 2", "replicas: 2147483648"}},
     "strategy.pipelines[0].replicas",
     28,
     17,
     "too large"},
    {"ReplicasHuge",
     {{"replicas: 2", "replicas: 2147483647"}},
     "strategy.pipelines",
     28,
     5,
     "GPUs of cluster"},
    {"MicroBatchesWrapToTheBatch",
     {{"micro_batch: 1\n", "micro_batch: 16\n"},
      {"micro_batches: 4", "micro_batches: 268435457"},
      {"replicas: 2", "replicas: 1"},
      {"global_batch: 8", "global_batch: 16"}},
     "strategy.pipelines",
     28,
     0,
     "4294967312"},
    {"TpBeyondNode",
     {{"{cluster: east, tp: 1,", "{cluster: east, tp: 2147483647,"}},
     "strategy.pipelines[0].stages[0].tp",
     31,
     0,
     "larger than a node"},
    // WAN structure
    {"TwoLinksBetweenOnePair",
     {{"    latency: 15ms\n",
       "    latency: 15ms\n  - between: [west, east]\n    bandwidth: 1Gbps\n    latency: 5ms\n"}},
     "wan[1].between",
     24,
     5,
     "a second WAN link"},
    {"NoWanPathBetweenUsedClusters",
     {{"wan:\n  - between: [east, west]\n    bandwidth: 10Gbps\n    latency: 15ms\n", ""}},
     "wan",
     0,
     0,
     "no WAN path joins clusters 'east' and 'west'"},
    {"WanLinkToItself",
     {{"between: [east, west]", "between: [east, east]"}},
     "wan[0].between",
     21,
     14,
     "twice"},
    // document structure
    {"SecondDocument",
     {{"  grad_sync: {algorithm: ring, bucket: 25MB}\n",
       "  grad_sync: {algorithm: ring, bucket: 25MB}\n---\nname: other\n"}},
     "",
     35,
     1,
     "second YAML document"},
    {"RecursiveAlias", {{"name: t\n", "name: t\nx: &a [*a]\n"}}, "x[0]", 2, 4, "contains it"},
    {"RecursiveAliasInMapping",
     {{"name: t\n", "name: t\nx: &a {y: *a}\n"}},
     "x.y",
     2,
     4,
     "contains it"},
    {"AliasBomb", {{"name: t\n", kBomb}}, "*", 0, 0, "more than 200000 values"},
    {"NestedBeyondTheParser",
     {{"name: t\n", "name: t\nx: " + repeat("[", 10000) + repeat("]", 10000) + "\n"}},
     "*",
     0,
     0,
     "nest more than 64 deep"},
    {"TokensBeyondAnyRun",
     {{"  precision: bf16\n", "  precision: bf16\n  tokens: 1e300T\n"}},
     "training.tokens",
     7,
     11,
     "beyond 10^18"},
    {"NestedTooDeep",
     {{"name: t\n", "name: t\nx: " + repeat("[", 100) + repeat("]", 100) + "\n"}},
     "*",
     2,
     0,
     "nest more than 64"},
    {"DuplicateKey",
     {{"  seq_len: 128\n", "  seq_len: 128\n  seq_len: 256\n"}},
     "training.seq_len",
     6,
     3,
     "duplicate key"},
    {"NotUtf8Latin1", {{"name: t\n", "name: caf\xe9\n"}}, "", 1, 10, "not UTF-8"},
    {"NotUtf8Overlong", {{"name: t\n", "name: a\xc0\xaf\n"}}, "", 1, 8, "not UTF-8"},
    {"NotUtf8Surrogate", {{"name: t\n", "name: \xed\xa0\x80\n"}}, "", 1, 7, "not UTF-8"},
    {"NotUtf8Truncated",
     {{"  grad_sync: {algorithm: ring, bucket: 25MB}\n",
       "  grad_sync: {algorithm: ring, bucket: 25MB}\n#\xe2\x82"}},
     "",
     34,
     2,
     "not UTF-8"},
    {"NotUtf8BeyondUnicode", {{"name: t\n", "name: \xf5\x80\x80\x80\n"}}, "", 1, 7, "not UTF-8"},
    {"ControlCharacter", {{"name: t\n", "name: t\x01\n"}}, "", 1, 8, "control character"},
    {"NulCharacter",
     {{"name: t\n", std::string("name: t\0x\n", 10)}},
     "",
     1,
     8,
     "control character"},
    {"UnknownKeyIsQuotedShort",
     {{"  seq_len: 128\n", "  " + repeat("k", 1000) + ": 1\n  seq_len: 128\n"}},
     "*",
     5,
     3,
     "(1000 characters)"},
    {"UnknownChoiceIsQuotedShort",
     {{"precision: bf16", "precision: " + repeat("p", 5000)}},
     "training.precision",
     6,
     14,
     "(5000 characters)"},
    {"SweepGridTooLarge",
     {{"name: t\n", "name: t\n" + kSweep3x30}},
     "sweep",
     3,
     0,
     "27000 points (30 x 30 x 30)"},
    {"CalibrationEfficiencyTiny",
     {{"    nic: {bandwidth: 200Gbps, latency: 2us}\n",
       "    nic: {bandwidth: 200Gbps, latency: 2us}\n    calibration: {gemm_efficiency: "
       "1e-300}\n"}},
     "clusters[0].calibration.gemm_efficiency",
     14,
     0,
     "a fraction from 0.01 to 1, found 1e-300"},
    {"CalibrationKernelOverheadHuge",
     {{"    nic: {bandwidth: 200Gbps, latency: 2us}\n",
       "    nic: {bandwidth: 200Gbps, latency: 2us}\n    calibration: {kernel_overhead: 2h}\n"}},
     "clusters[0].calibration.kernel_overhead",
     14,
     0,
     "from 0 to 1s, found 2h"},
    {"WanTcpWindowZero",
     {{"    latency: 15ms\n", "    latency: 15ms\n    tcp_window: 0B\n"}},
     "wan[0].tcp_window",
     24,
     17,
     "a TCP window is at least 1KiB, found 0B"},
    {"SimulationTcpWindowZero",
     {{"  grad_sync: {algorithm: ring, bucket: 25MB}\n",
       "  grad_sync: {algorithm: ring, bucket: 25MB}\nsimulation: {tcp_window: 0B}\n"}},
     "simulation.tcp_window",
     34,
     26,
     "at least 1KiB"},
    {"HiddenTooWideForItsFfn",
     {{"hidden: 256", "hidden: 1000000000"}},
     "model.hidden",
     2,
     0,
     "at most 16777216, found 1000000000"},
    {"LayersPastTheSimulator",
     {{"layers: 4", "layers: 10000000"}},
     "model.layers",
     2,
     0,
     "at most 100000"},
    {"EscapedEscInName",
     {{"name: t\n", "name: \"\\e[31mt\\e[0m\"\n"}},
     "name",
     1,
     7,
     "control character \\x1b"},
    {"EscapedNulInName",
     {{"name: t\n", "name: \"t\\0\"\n"}},
     "name",
     1,
     7,
     "control character \\x00"},
    {"EscapedBellInKey",
     {{"  seq_len: 128\n", "  \"seq\\x07len\": 128\n  seq_len: 128\n"}},
     "training",
     5,
     3,
     "a key holds the control character \\x07"},
    {"LongBandwidthQuotedShort",
     {{"    bandwidth: 10Gbps\n", "    bandwidth: " + repeat("9", 100000) + "\n"}},
     "wan[0].bandwidth",
     22,
     16,
     "(100000 characters)"},
    {"BlockNestedPastYamlCpp",
     {{"name: t\n",
       [] {
         std::string deep = "name: t\nx:\n";
         for (int i = 1; i <= 1000; ++i) deep += std::string(i, ' ') + "k:\n";
         return deep;
       }()}},
     "",
     0,
     0,
     "nest more than 64 deep"},
    {"SweepIndexOfTwentyDigits",
     {{"name: t\n", "name: t\nsweep:\n  wan[99999999999999999999].bandwidth: [1Gbps]\n"}},
     "*",
     3,
     3,
     "no [N] of more than 9 digits"},
    {"SweepSetsOneValueTwice",
     {{"name: t\n",
       "name: t\nsweep:\n  wan[*].bandwidth: [1Gbps, 2Gbps]\n  wan[0].bandwidth: [3Gbps]\n"}},
     "sweep.wan[0].bandwidth",
     4,
     3,
     "'wan[0].bandwidth' sets what 'wan[*].bandwidth' (line 3) already sweeps"},
    {"SweepAxisAndZipSetOneValue",
     {{"name: t\n",
       "name: t\nsweep:\n  training.seq_len: [64, 128]\n  zip:\n    training.seq_len: [32, 64]\n"}},
     "sweep.zip.training.seq_len",
     5,
     5,
     "already sweeps"},
    {"PlannerFragmentsPastTheLayers",
     {{"  grad_sync: {algorithm: ring, bucket: 25MB}\n",
       "  grad_sync: {algorithm: ring, bucket: 25MB}\nplanner: {outer_sync: [none, diloco], "
       "inner_steps: [8], fragments: [8]}\n"}},
     "planner.fragments[0]",
     34,
     0,
     "8 fragments, but the model has 4 layers"},
    {"DoubleQuoteNeverClosed",
     {{"  grad_sync: {algorithm: ring, bucket: 25MB}\n",
       "  grad_sync: {algorithm: ring, bucket: 25MB}\ndescription: \"two clusters\n"}},
     "",
     34,
     14,
     "a double-quoted text opens here and is never closed"},
    {"ModelAsList",
     {{"model: {name: tiny, layers: 4, hidden: 256, heads: 4, vocab: 1000}", "model: [1, 2]"}},
     "model",
     2,
     8,
     "expected a zoo model name"},
};

class HostileScenario : public ::testing::TestWithParam<ScenarioCase> {};

TEST_P(HostileScenario, IsRefusedWhereItIsWrong) {
  const ScenarioCase& c = GetParam();
  std::string text = kBase;
  for (const auto& [from, to] : c.changes) text = replaced(text, from, to);
  TempDir dir;
  const std::string file = dir.write("scenario.yaml", text);
  core::Diagnostics diags;
  const auto points = apps::check_scenario_file(file, diags);
  EXPECT_FALSE(points.has_value()) << "accepted";
  const core::Diagnostic* found = nullptr;
  for (const auto& d : diags.all())
    // "*": a long key path (a deep or expanded document); only the message counts.
    if (d.severity == core::Severity::error && (c.key == "*" || d.key_path == c.key) &&
        (core::format_diagnostic(d)).find(c.message) != std::string::npos) {
      found = &d;
      break;
    }
  ASSERT_NE(found, nullptr) << "no error at '" << c.key << "' saying '" << c.message << "' in:\n"
                            << diags.format();
  EXPECT_EQ(found->where.file, file);
  if (c.line > 0) {
    EXPECT_EQ(found->where.line, c.line) << core::format_diagnostic(*found);
  }
  if (c.column > 0) {
    EXPECT_EQ(found->where.column, c.column) << core::format_diagnostic(*found);
  }
  // Nothing of the input is echoed at length.
  for (const auto& d : diags.all()) EXPECT_LT(core::format_diagnostic(d).size(), 1200u);
  // The command says the same and exits 1.
  const CliResult r = cli({"check", file});
  EXPECT_EQ(r.status, apps::kBadInput) << r.err;
  EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Cases, HostileScenario, ::testing::ValuesIn(kScenarioCases),
                         [](const auto& info) { return std::string(info.param.name); });

// Quotes that do not open a scalar, or sit in comments, block scalars or other quotes, are
// not taken for an unclosed one (yaml-cpp reads all of these).
TEST(HostileScenarioFollowOns, QuotesInsideTextAreNotUnclosedQuotes) {
  const std::string text =
      "# a \"comment with a quote\n"
      "name: it's \"fine\"\n"
      "description: |\n"
      "  a block with \"one quote\n"
      "  key: \"x\n"
      "other: >-\n"
      "  folded \"text\n"
      "list: [\"a\", 'b''c', \"d\\\"e\", plain\"q]\n"
      "map: {\"k\": \"v # not a comment\", 'k2': x}\n"
      "url: a#b\"c\n"
      "\"quoted key\": 1\n";
  core::Diagnostics diags;
  const auto n = core::parse_yaml(text, "q.yaml", diags);
  ASSERT_TRUE(n.has_value()) << diags.format();
  EXPECT_EQ(n->find("name")->text, "it's \"fine\"");
  EXPECT_EQ(n->find("url")->text, "a#b\"c");
  EXPECT_NE(n->find("quoted key"), nullptr);
}

// What a message quotes of input: terminal controls escaped (C0, DEL, C1, and the marks
// that reorder or break a line: U+200E/F, U+2028/9, U+202A-E, U+2066-9), 60 characters,
// never cut inside a UTF-8 sequence. Python's hgsim.plots quotes through the same function.
TEST(HostileScenarioFollowOns, ExcerptsEscapeWhatATerminalWouldActOn) {
  EXPECT_EQ(core::excerpt("a\x1b[31m\x7f"), "a\\x1b[31m\\x7f");
  EXPECT_EQ(core::excerpt("c1\xc2\x9b"), "c1\\u009b");
  EXPECT_EQ(core::excerpt("evil\xe2\x80\xaeTXT.exe"), "evil\\u202eTXT.exe");
  EXPECT_EQ(core::excerpt("line\xe2\x80\xa8two \xe2\x81\xa6x"), "line\\u2028two \\u2066x");
  EXPECT_EQ(core::excerpt("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac");  // plain text
  const std::string long_text = std::string(59, 'x') + "\xc3\xa9" + std::string(100, 'y');
  EXPECT_EQ(core::excerpt(long_text), std::string(59, 'x') + "\xc3\xa9... (160 characters)");
  EXPECT_EQ(core::escaped(std::string(1000, 'z') + "\x07"), std::string(1000, 'z') + "\\x07");
  // Characters are code points: 60 'é' are shown whole, 61 are cut with their count.
  std::string e60, e61;
  for (int i = 0; i < 60; ++i) e60 += "\xc3\xa9";
  e61 = e60 + "\xc3\xa9";
  EXPECT_EQ(core::excerpt(e60), e60);
  EXPECT_EQ(core::excerpt(e61), e60 + "... (61 characters)");
  EXPECT_EQ(core::utf8_length(e61), 61u);
  // Bytes that are not UTF-8 (a Latin-1 name, a stray continuation byte, a truncated or
  // overlong sequence, a surrogate) are shown as \xNN, never passed to the terminal.
  EXPECT_EQ(core::escaped("caf\xe9"), "caf\\xe9");
  EXPECT_EQ(core::escaped("\xff\x80"), "\\xff\\x80");
  EXPECT_EQ(core::escaped("a\xe2\x82"), "a\\xe2\\x82");
  EXPECT_EQ(core::escaped("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(core::escaped("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  EXPECT_EQ(core::escaped("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");  // an emoji is text
  // A diagnostic's file and key path are shown the same way (a dict given to the Python
  // module has keys no reader checked), a long one by its ends.
  core::Diagnostic d;
  d.where = {"dir/\x1b[2J.yaml", 3, 4};
  d.key_path = "codec." + std::string(1000, '\x07');
  d.message = "m";
  const std::string shown = core::format_diagnostic(d);
  EXPECT_EQ(shown.substr(0, 26), "dir/\\x1b[2J.yaml:3:4: erro") << shown;
  EXPECT_EQ(shown.find('\x07'), std::string::npos) << shown;
  EXPECT_EQ(shown.find('\x1b'), std::string::npos) << shown;
  EXPECT_LT(shown.size(), 800u) << shown;
}

// A length stated in characters counts characters (code points), not bytes: 150 'é' (300
// bytes) is a name of 150 characters, 201 'é' is refused as 201.
TEST(HostileScenarioFollowOns, NamesAreCountedInCharactersNotBytes) {
  TempDir dir;
  const std::string accented = repeat("\xc3\xa9", 150);
  CliResult r = cli(
      {"check", dir.write("ok.yaml", replaced(kBase, "name: t\n", "name: " + accented + "\n"))});
  EXPECT_EQ(r.status, 0) << r.err;
  r = cli({"check", dir.write("long.yaml", replaced(kBase, "name: t\n",
                                                    "name: " + repeat("\xc3\xa9", 201) + "\n"))});
  EXPECT_EQ(r.status, apps::kBadInput);
  EXPECT_NE(r.err.find("name: a name of 201 characters; names are at most 200 characters"),
            std::string::npos)
      << r.err;
}

// Every message that names what it did not find (a codec, a GPU, a model, a cluster, a key,
// a unit, a sweep path) quotes at most 60 characters of it: a 100 000-character name is
// one short line, not 100 kB.
TEST(HostileScenarioFollowOns, UnknownNamesAreQuotedShort) {
  // Names are at most 200 characters and YAML keys 1024, so those are as long as may be;
  // a codec name is any text.
  const std::string text(100000, 'q'), key(1000, 'k'), name(200, 'n');
  auto cut = [](const std::string& s) {
    return s.substr(0, 60) + "... (" + std::to_string(s.size()) + " characters)";
  };
  struct Case {
    std::string from, to, says;
  };
  const std::string last = "  grad_sync: {algorithm: ring, bucket: 25MB}\n";
  const std::vector<Case> all = {
      {last, last + "compression:\n  wan_activations: " + text + "\n",
       "unknown codec '" + cut(text) + "'"},
      {last, last + "compression:\n  wan_activations: {codec: int8, " + key + ": 1}\n",
       "has no parameter '" + cut(key) + "'"},
      {"gpu: A100-80GB-SXM", "gpu: " + name, "unknown GPU '" + cut(name) + "'"},
      {"model: {name: tiny, layers: 4, hidden: 256, heads: 4, vocab: 1000}", "model: " + name,
       "unknown model '" + cut(name) + "'"},
      {"{cluster: east, tp: 1, layers: 2}", "{cluster: " + name + ", tp: 1, layers: 2}",
       "unknown cluster '" + cut(name) + "'"},
      {"  seq_len: 128\n", "  seq_len: 128\n  " + key + ": 1\n", "unknown key '" + cut(key) + "'"},
      {"between: [east, west]", "between: [east, " + name + "]", cut(name)},
      {"bandwidth: 10Gbps", "bandwidth: 10" + text, "unknown unit '" + cut(text) + "'"},
      {last, last + "sweep:\n  wan[0]." + key + "[*]: [1, 2]\n", cut(key)},
  };
  TempDir dir;
  for (const Case& c : all) {
    const std::string file = dir.write("s.yaml", replaced(kBase, c.from, c.to));
    const CliResult r = cli({"check", file});
    EXPECT_EQ(r.status, apps::kBadInput) << c.says;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err.substr(0, 2000);
    std::istringstream lines(r.err);
    for (std::string line; std::getline(lines, line);)
      EXPECT_LT(line.size(), 1200u) << line.substr(0, 300);
  }
}

// A refused value is reported once: no second error quotes the default or the zero left
// in its place (ffn_hidden = 4 x a refused hidden, a cluster of 0 x 2 GPUs).
TEST(HostileScenarioFollowOns, ARefusedValueIsReportedOnce) {
  const std::pair<std::string, std::string> cases[] = {
      {"hidden: 256", "hidden: 1000000000"},
      {"heads: 4", "heads: 100000000"},
      {"    nodes: 1\n    gpus_per_node: 2\n    nvlink: {bandwidth: 300GB/s",
       "    nodes: 1000000000\n    gpus_per_node: 2\n    nvlink: {bandwidth: 300GB/s"},
  };
  for (const auto& [from, to] : cases) {
    TempDir dir;
    const std::string file = dir.write("scenario.yaml", replaced(kBase, from, to));
    core::Diagnostics diags;
    EXPECT_FALSE(apps::check_scenario_file(file, diags).has_value()) << to;
    EXPECT_EQ(diags.error_count(), 1) << to << ":\n" << diags.format();
  }
}

// A thousand unknown keys: every one is counted, the first 100 printed, and reading them
// stays linear (a quadratic duplicate check takes about 28 s on a 120 000-key mapping).
TEST(HostileScenarioFollowOns, ManyErrorsArePrintedAsAHundredAndACount) {
  std::string keys;
  for (int i = 0; i < 1000; ++i) keys += "  unknown_" + std::to_string(i) + ": 1\n";
  TempDir dir;
  const std::string file =
      dir.write("scenario.yaml", replaced(kBase, "  seq_len: 128\n", "  seq_len: 128\n" + keys));
  core::Diagnostics diags;
  EXPECT_FALSE(apps::check_scenario_file(file, diags).has_value());
  EXPECT_EQ(diags.error_count(), 1000);
  const std::string text = diags.format();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 101) << text.substr(0, 500);
  EXPECT_NE(text.find("... and 901 more not shown (1000 errors and 1 warning in all)"),
            std::string::npos)
      << text.substr(text.size() - 300);
}

// ---- bandwidth traces --------------------------------------------------------------------

struct TraceCase {
  const char* name;
  std::string csv;  // the trace's text
  int line;         // where in the CSV the error is (0: at the scenario's trace key)
  int column;       // 0: any
  std::string message;
};

void PrintTo(const TraceCase& c, std::ostream* os) {
  *os << c.name;
}

const TraceCase kTraceCases[] = {
    {"EmptyTime", ",1Gbps\n", 1, 1, "no time"},
    {"BlankTime", "0,1Gbps\n  ,2Gbps\n", 2, 1, "no time"},
    {"StepOfANanosecond", "0,1Gbps\n1e-9,2Gbps\n", 2, 1, "shortest step"},
    {"RateOfAlmostNothing", "0,1e-300bps\n", 1, 3, "outside the range"},
    {"RateOverflows", "0,1e300Tbps\n", 1, 3, "outside the range"},
    {"TimeInfinity", "0,1Gbps\ninf,2Gbps\n", 2, 1, "expected a number"},
    {"TimeNotADouble", "0,1Gbps\n1e400,2Gbps\n", 2, 1, "out of range"},
    {"TimeNan", "0,1Gbps\nnan,2Gbps\n", 2, 1, "expected a number"},
    {"TimeNegative", "-1,1Gbps\n", 1, 1, "start at 0"},
    {"TimeGoesBack", "0,1Gbps\n10,1Gbps\n5,1Gbps\n", 3, 1, "increase strictly"},
    {"FirstRowNotAtZero", "5,1Gbps\n", 1, 1, "at time 0"},
    {"NoComma", "0 1Gbps\n", 1, 1, "expected 'time_s,bandwidth'"},
    {"LongGarbageRowQuotedShort", repeat("A", 100000) + "\n", 1, 1, "(100000 characters)"},
    {"NotUtf8", "0,1Gbps\n# caf\xe9\n", 2, 6, "not UTF-8"},
    {"NoRows", "# nothing\n", 0, 0, "has no rows"},
    {"RateWithoutUnit", "0,100\n", 1, 3, "no unit"},
};

class HostileTrace : public ::testing::TestWithParam<TraceCase> {};

TEST_P(HostileTrace, IsRefusedAtItsRow) {
  const TraceCase& c = GetParam();
  TempDir dir;
  const std::string csv = dir.write("bw.csv", c.csv);
  const std::string file =
      dir.write("scenario.yaml",
                replaced(kBase, "    latency: 15ms\n", "    latency: 15ms\n    trace: bw.csv\n"));
  core::Diagnostics diags;
  EXPECT_FALSE(apps::check_scenario_file(file, diags).has_value());
  const core::Diagnostic* found = nullptr;
  for (const auto& d : diags.all())
    if (d.key_path == "wan[0].trace" &&
        core::format_diagnostic(d).find(c.message) != std::string::npos)
      found = &d;
  ASSERT_NE(found, nullptr) << diags.format();
  if (c.line > 0) {
    EXPECT_EQ(found->where.file, csv);
    EXPECT_EQ(found->where.line, c.line);
    if (c.column > 0) {
      EXPECT_EQ(found->where.column, c.column);
    }
  } else {
    EXPECT_EQ(found->where.file, file);
    EXPECT_EQ(found->where.line, 24);
  }
  for (const auto& d : diags.all()) EXPECT_LT(core::format_diagnostic(d).size(), 1200u);
}

INSTANTIATE_TEST_SUITE_P(Cases, HostileTrace, ::testing::ValuesIn(kTraceCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(TraceRows, AStepOfTheShortestLengthWrittenInDecimalIsAccepted) {
  // 0.009 - 0.008 is 0.0009999999999999992 in binary: one step of 1 ms as written.
  core::Diagnostics diags;
  const auto steps =
      core::parse_bandwidth_trace("0,1Gbps\n0.008,2Gbps\n0.009,3Gbps\n", "bw.csv", "t", diags);
  EXPECT_FALSE(diags.has_errors()) << diags.format();
  EXPECT_EQ(steps.size(), 3u);
  // A spreadsheet's byte-order mark is not part of the first row.
  core::Diagnostics bom;
  EXPECT_EQ(core::parse_bandwidth_trace("\xEF\xBB\xBF"
                                        "0,1Gbps\n",
                                        "bw.csv", "t", bom)
                .size(),
            1u);
  EXPECT_FALSE(bom.has_errors()) << bom.format();
}

TEST(TraceRows, ErrorsStopAfterTwentyRows) {
  std::string csv = "0,1Gbps\n";
  for (int i = 1; i <= 100000; ++i) csv += std::to_string(i) + ",fast\n";
  core::Diagnostics diags;
  core::parse_bandwidth_trace(csv, "bw.csv", "t", diags);
  EXPECT_EQ(diags.error_count(), 21) << diags.format().substr(0, 2000);
  EXPECT_NE(diags.format().find("more than 20 rows refused"), std::string::npos);
}

TEST(TraceRows, ARowAfterARefusedFirstRowIsNotBlamedForNotBeingFirst) {
  core::Diagnostics diags;
  core::parse_bandwidth_trace("-5,1Gbps\n10,2Gbps\n", "bw.csv", "t", diags);
  EXPECT_EQ(diags.error_count(), 1) << diags.format();
  EXPECT_EQ(diags.format().find("must be at time 0"), std::string::npos) << diags.format();
}

// A trace path may name only a regular .csv file: never a device, FIFO, directory or some
// other file, and nothing of such a file is quoted.
struct TracePathCase {
  const char* name;
  const char* written;  // the trace: value
  std::string message;
};

void PrintTo(const TracePathCase& c, std::ostream* os) {
  *os << c.name;
}

const TracePathCase kTracePathCases[] = {
    {"NotACsvFile", "/etc/passwd", "a .csv file"},
    {"NoExtension", "bw", "a .csv file"},
    {"EmptyPath", "''", "a .csv file"},
    {"Missing", "missing.csv", "cannot open"},
    {"Directory", "dir.csv", "is a directory"},
    {"Fifo", "fifo.csv", "FIFO"},
    {"DeviceBehindALink", "zero.csv", "character device"},
};

class HostileTracePath : public ::testing::TestWithParam<TracePathCase> {};

TEST_P(HostileTracePath, IsRefusedWithoutReadingIt) {
  const TracePathCase& c = GetParam();
  TempDir dir;
  fs::create_directories(dir.dir() / "dir.csv");
  ASSERT_EQ(::mkfifo(dir.path("fifo.csv").c_str(), 0600), 0);
  fs::create_symlink("/dev/zero", dir.dir() / "zero.csv");
  const std::string file = dir.write(
      "scenario.yaml", replaced(kBase, "    latency: 15ms\n",
                                std::string("    latency: 15ms\n    trace: ") + c.written + "\n"));
  core::Diagnostics diags;
  EXPECT_FALSE(apps::check_scenario_file(file, diags).has_value());
  bool found = false;
  for (const auto& d : diags.all())
    if (d.key_path == "wan[0].trace" && d.where.file == file && d.where.line == 24 &&
        core::format_diagnostic(d).find(c.message) != std::string::npos)
      found = true;
  EXPECT_TRUE(found) << diags.format();
  EXPECT_EQ(diags.format().find("root:"), std::string::npos);  // /etc/passwd is not quoted
}

INSTANTIATE_TEST_SUITE_P(Cases, HostileTracePath, ::testing::ValuesIn(kTracePathCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- plan files (JSON) --------------------------------------------------------------------

const std::string kPlan =
    R"({"schedule": "1f1b", "micro_batch": 1, "pipelines": [{"replicas": 2, "micro_batches": 4,)"
    R"( "stages": [{"cluster": "east", "layers": 2}, {"cluster": "west", "layers": 2}]}]})";

struct PlanCase {
  const char* name;
  std::string text;  // the plan file
  std::string key;   // the key path of the error
  int line;          // 0: a JSON value (no position), else where the text is wrong
  int column;
  std::string message;
};

void PrintTo(const PlanCase& c, std::ostream* os) {
  *os << c.name;
}

const PlanCase kPlanCases[] = {
    {"NestedTenThousandDeep", repeat("[", 10000) + repeat("]", 10000), "", 1, 65,
     "nest more than 64"},
    {"ObjectsNestedDeep", repeat("{\"a\":", 5000) + "1" + repeat("}", 5000), "", 1, 321,
     "nest more than 64"},
    {"EmptyCluster", replaced(kPlan, "\"cluster\": \"east\"", "\"cluster\": \"\""),
     "pipelines[0].stages[0].cluster", 0, 0, "may not be empty"},
    {"MicroBatchNotADouble", replaced(kPlan, "\"micro_batch\": 1", "\"micro_batch\": 1e400"), "", 1,
     41, "number overflow parsing '1e400'"},
    {"MicroBatchHugeInteger",
     replaced(kPlan, "\"micro_batch\": 1", "\"micro_batch\": 100000000000000000000000000000"),
     "micro_batch", 0, 0, "too large"},
    {"BucketNotADouble",
     replaced(kPlan, "\"micro_batch\": 1,",
              "\"micro_batch\": 1, \"grad_sync\": {\"bucket\": \"1e400MB\"},"),
     "grad_sync.bucket", 0, 0, "too large or too small"},
    {"NotUtf8", replaced(kPlan, "1f1b", "1f1b\xe9"), "", 1, 19, "not UTF-8"},
    {"ControlCharacterInString",
     replaced(kPlan, "1f1b",
              "1f\x01"
              "1b"),
     "", 1, 17, "control character"},
    {"DuplicateKey",
     replaced(kPlan, "\"micro_batch\": 1,", "\"micro_batch\": 1, \"micro_batch\": 2,"),
     "micro_batch", 0, 0, "duplicate key"},
    {"TrailingGarbage", kPlan + " x", "", 1, 0, "not valid JSON"},
    {"Truncated", kPlan.substr(0, 40), "", 1, 0, "not valid JSON"},
    {"NanLiteral", replaced(kPlan, "\"micro_batch\": 1", "\"micro_batch\": NaN"), "", 1, 0,
     "not valid JSON"},
    {"Empty", "", "", 1, 1, "not valid JSON"},
    {"ListAtTheTop", "[1, 2]", "", 0, 0, "expected a mapping"},
    {"ReplicasHuge", replaced(kPlan, "\"replicas\": 2", "\"replicas\": 2147483647"), "pipelines", 0,
     0, "GPUs of cluster 'east'"},
    {"BatchWrapsAround",
     replaced(replaced(kPlan, "\"micro_batch\": 1", "\"micro_batch\": 16"), "\"micro_batches\": 4",
              "\"micro_batches\": 268435456"),
     "pipelines", 0, 0, "8589934592"},
    {"TpNegative", replaced(kPlan, "\"cluster\": \"east\",", "\"cluster\": \"east\", \"tp\": -2,"),
     "pipelines[0].stages[0].tp", 0, 0, "at least 1"},
    {"UnknownCluster", replaced(kPlan, "\"cluster\": \"west\"", "\"cluster\": \"west/n0\""),
     "pipelines[0].stages[1].cluster", 0, 0, "unknown cluster"},
    // An escape makes a control character without a control byte in the file.
    {"EscapedNulInCluster",
     replaced(kPlan, "\"cluster\": \"east\"", "\"cluster\": \"ea\\u0000st\""),
     "pipelines[0].stages[0].cluster", 0, 0, "control character \\x00"},
    {"EscapedEscInSchedule", replaced(kPlan, "\"1f1b\"", "\"\\u001b[31m1f1b\""), "schedule", 0, 0,
     "control character \\x1b"},
    {"EscapedC1InKey", replaced(kPlan, "\"micro_batch\"", "\"micro\\u009bbatch\""), "", 0, 0,
     "control character \\u009b"},
    // The scenario has no compression: the plan's codec is the plan file's problem.
    {"UnknownCodec",
     replaced(kPlan, "\"micro_batch\": 1,",
              "\"micro_batch\": 1, \"compression\": {\"wan_activations\": \"zip\"},"),
     "compression.wan_activations", 0, 0, "unknown codec 'zip'"},
    {"LayersDoNotAddUp", replaced(kPlan, "\"layers\": 2}]", "\"layers\": 1}]"),
     "pipelines[0].stages", 0, 0, "the stages hold 3 layers"},
};

class HostilePlan : public ::testing::TestWithParam<PlanCase> {};

TEST_P(HostilePlan, IsRefusedWhereItIsWrong) {
  const PlanCase& c = GetParam();
  TempDir dir;
  const std::string scenario = dir.write("scenario.yaml", kBase);
  const std::string plan = dir.write("plan.json", c.text);
  core::Diagnostics diags;
  auto points = apps::check_scenario_file(scenario, diags);
  ASSERT_TRUE(points.has_value()) << diags.format();
  auto parsed = core::load_plan(plan, diags);
  if (parsed && !diags.has_errors())
    apps::check_plan_file_against(*parsed, points->front().checked, diags, plan);
  const core::Diagnostic* found = nullptr;
  for (const auto& d : diags.all())
    if (d.severity == core::Severity::error && d.key_path == c.key &&
        core::format_diagnostic(d).find(c.message) != std::string::npos)
      found = &d;
  ASSERT_NE(found, nullptr) << diags.format();
  // The plan file is named, never the scenario: its checks passed before the plan was read.
  EXPECT_EQ(found->where.file, plan);
  if (c.line > 0) {
    EXPECT_EQ(found->where.line, c.line) << core::format_diagnostic(*found);
  }
  if (c.column > 0) {
    EXPECT_EQ(found->where.column, c.column) << core::format_diagnostic(*found);
  }
  const CliResult r = cli({"run", scenario, "--plan", plan});
  EXPECT_EQ(r.status, apps::kBadInput) << r.err;
  EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  // Every error line names the plan file (the scenario's own warnings may name it).
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);)
    if (line.find(": error: ") != std::string::npos) {
      EXPECT_EQ(line.rfind(plan, 0), 0u) << line;
    }
  EXPECT_EQ(r.err.find('\0'), std::string::npos) << "a NUL byte reached stderr";
}

INSTANTIATE_TEST_SUITE_P(Cases, HostilePlan, ::testing::ValuesIn(kPlanCases),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- special files as inputs ---------------------------------------------------------

TEST(HostileFiles, SpecialFilesAreRefusedBeforeAnyRead) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.path("fifo.yaml").c_str(), 0600), 0);
  const std::string scenario = dir.write("scenario.yaml", kBase);
  const struct {
    std::string path;
    std::string message;
  } cases[] = {{"/dev/zero", "is a character device"},
               {dir.path("fifo.yaml"), "is a FIFO"},
               {dir.dir().string(), "is a directory"},
               {dir.path("missing.yaml"), "No such file"}};
  for (const auto& c : cases) {
    const CliResult check = cli({"check", c.path});
    EXPECT_EQ(check.status, apps::kBadInput) << c.path;
    EXPECT_NE(check.err.find(c.path + ": error: "), std::string::npos) << check.err;
    EXPECT_NE(check.err.find(c.message), std::string::npos) << check.err;
    const CliResult plan = cli({"run", scenario, "--plan", c.path});
    EXPECT_EQ(plan.status, apps::kBadInput) << c.path;
    EXPECT_NE(plan.err.find(c.message), std::string::npos) << plan.err;
  }
}

TEST(HostileFiles, AnEmptyScenarioSaysWhatItNeeds) {
  TempDir dir;
  const CliResult r = cli({"check", dir.write("empty.yaml", "")});
  EXPECT_EQ(r.status, apps::kBadInput);
  EXPECT_NE(r.err.find("empty.yaml:1:1: error: expected a mapping"), std::string::npos) << r.err;
}

// ---- codec buffers --------------------------------------------------------------------

std::vector<std::byte> header(compress::CodecKind kind, std::uint64_t count, std::uint32_t a,
                              std::uint32_t b, std::uint64_t kept, std::size_t total) {
  std::vector<std::byte> buf(total);
  std::memcpy(buf.data(), "HGCD", 4);
  buf[4] = std::byte{1};
  buf[5] = static_cast<std::byte>(kind);
  std::memcpy(buf.data() + 8, &count, 8);
  std::memcpy(buf.data() + 16, &a, 4);
  std::memcpy(buf.data() + 20, &b, 4);
  std::memcpy(buf.data() + 24, &kept, 8);
  return buf;
}

std::string inspect_error(const std::vector<std::byte>& buf) {
  try {
    compress::inspect(buf);
  } catch (const compress::CodecError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(HostileCodecBuffers, AHeaderMayNotClaimMoreThanTheBufferAndTheLimitAllow) {
  using compress::CodecKind;
  // 49 bytes of top-k claiming 2^28 elements (1 GiB as fp32) from one kept value.
  EXPECT_NE(inspect_error(header(CodecKind::topk, 1ull << 28, 0, 0, 1, 49)).find("one in 2^20"),
            std::string::npos);
  EXPECT_NE(inspect_error(header(CodecKind::randomk, 1ull << 27, 0, 0, 64, 49)).find("2^20"),
            std::string::npos);
  // Dense codecs and PowerSGD past the element limit, whatever the buffer holds.
  EXPECT_NE(inspect_error(header(CodecKind::none, 1ull << 40, 0, 0, 0, 64)).find("HGSIM_MAX_CODEC"),
            std::string::npos);
  EXPECT_NE(inspect_error(header(CodecKind::powersgd, 1ull << 30, 1, 1u << 15, 0, 64))
                .find("HGSIM_MAX_CODEC_ELEMENTS"),
            std::string::npos);
  EXPECT_NE(inspect_error(header(CodecKind::none, (1ull << 40) + 1, 0, 0, 0, 64)).find("2^40"),
            std::string::npos);
  // Below the limits, the buffer must hold what the header describes.
  EXPECT_NE(inspect_error(header(CodecKind::none, 1000, 0, 0, 0, 49)).find("truncated"),
            std::string::npos);
  EXPECT_NE(
      inspect_error(header(CodecKind::topk, 1ull << 20, 0, 0, 1, 49)).find("header describes"),
      std::string::npos);
}

// ---- integer arithmetic -------------------------------------------------------------------

TEST(CheckedArithmetic, RefusesWhatDoesNotFitIn64Bits) {
  EXPECT_EQ(core::checked_mul(65536, 65537), 4295032832LL);
  EXPECT_EQ(core::checked_mul(INT64_MAX, 2), std::nullopt);
  EXPECT_EQ(core::checked_mul(-1, INT64_MIN), std::nullopt);
  EXPECT_EQ(core::checked_add(INT64_MAX, 1), std::nullopt);
  EXPECT_EQ(core::checked_add(INT64_MAX - 1, 1), INT64_MAX);
}

// ---- writing files ------------------------------------------------------------------------

TEST(AtomicFile, ReplacesTheTargetOnlyWhenComplete) {
  TempDir dir;
  const std::string target = dir.write("out.json", "old");
  {
    core::AtomicFile f(target);
    f.stream() << "new";
    // Not committed: an exception or a signal here leaves the old file and no temporary.
  }
  EXPECT_EQ(std::ifstream(target).rdbuf() != nullptr, true);
  std::stringstream old_text;
  old_text << std::ifstream(target).rdbuf();
  EXPECT_EQ(old_text.str(), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.dir()), fs::directory_iterator()), 1);
  EXPECT_EQ(core::write_file_atomically(target, "new"), std::nullopt);
  std::stringstream new_text;
  new_text << std::ifstream(target).rdbuf();
  EXPECT_EQ(new_text.str(), "new");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.dir()), fs::directory_iterator()), 1);
}

TEST(AtomicFile, ReportsEveryWriteError) {
  TempDir dir;
  auto e = core::write_file_atomically("/dev/full", "x");
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->find("No space left on device"), std::string::npos) << *e;
  e = core::write_file_atomically(dir.path("no/such/folder/out.json"), "x");
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->find("No such file or directory"), std::string::npos) << *e;
  e = core::write_file_atomically(dir.dir().string(), "x");
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->find("is a directory"), std::string::npos) << *e;
  EXPECT_EQ(core::write_file_atomically("/dev/null", "x"), std::nullopt);
}

// ---- sweep databases ---------------------------------------------------------------------

// A database must be a regular file: a folder or a device is named for what it is (it was
// "disk I/O error", or /dev/full taken for an SQLite database), for every command that opens
// one.
TEST(HostileDatabase, ADatabaseThatIsNotARegularFileIsSaidToBeSo) {
  TempDir dir;
  const std::string scenario =
      dir.write("s.yaml", kBase + "sweep:\n  wan[*].bandwidth: [1Gbps, 10Gbps]\n");
  CliResult r = cli({"sweep", scenario, "--db", dir.dir().string(), "-j", "1"});
  EXPECT_EQ(r.status, apps::kBadInput);
  EXPECT_NE(r.err.find("the sweep database '" + dir.dir().string() +
                       "' is a directory, not a regular file"),
            std::string::npos)
      << r.err;
  r = cli({"results", dir.dir().string()});
  EXPECT_EQ(r.status, apps::kBadInput);
  EXPECT_NE(r.err.find("is a directory, not a regular file"), std::string::npos) << r.err;
  if (fs::exists("/dev/full")) {
    r = cli({"sweep", scenario, "--db", "/dev/full", "-j", "1"});
    EXPECT_EQ(r.status, apps::kBadInput);
    EXPECT_NE(r.err.find("'/dev/full' is a character device, not a regular file"),
              std::string::npos)
        << r.err;
  }
  // A path a terminal would act on is quoted escaped.
  r = cli({"results", dir.path("x\x1b[2J.sqlite")});
  EXPECT_EQ(r.status, apps::kBadInput);
  EXPECT_NE(r.err.find("x\\x1b[2J.sqlite': no such file"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
}

// --resume (or --point) into a database that holds another scenario's sweep is refused, the
// database and both scenarios named: its points would have been replaced one by one. The
// same scenario, edited, resumes as before.
TEST(HostileDatabase, AnotherScenariosSweepIsNotResumedOver) {
  TempDir dir;
  const std::string grid = "sweep:\n  wan[*].bandwidth: [1Gbps, 10Gbps]\n";
  const std::string first = dir.write("a.yaml", kBase + grid);
  const std::string other =
      dir.write("b.yaml", replaced(kBase, "name: t\n", "name: other\n") + grid);
  const std::string db = dir.path("a.sqlite");
  CliResult r = cli({"sweep", first, "--db", db, "-j", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const auto& flag : std::vector<std::vector<std::string>>{{"--resume"}, {"--point", "0"}}) {
    std::vector<std::string> words{"sweep", other, "--db", db, "-j", "1"};
    words.insert(words.end(), flag.begin(), flag.end());
    r = cli(words);
    EXPECT_EQ(r.status, apps::kBadInput) << flag[0];
    EXPECT_NE(r.err.find("'" + db + "' holds the sweep of scenario 't' (" + first +
                         ", 2 points), not of 'other' (" + other + ")"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("--db FILE"), std::string::npos) << r.err;
  }
  r = cli({"results", db, "--csv"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3) << r.out;  // header, 2 points
  // The same scenario, edited (its name kept), resumes: the changed points run again.
  const std::string edited =
      dir.write("a.yaml", replaced(kBase, "latency: 15ms", "latency: 20ms") + grid);
  r = cli({"sweep", edited, "--db", db, "-j", "1", "--resume"});
  EXPECT_EQ(r.status, 0) << r.err;
}

// One writer at a time: a second hgsim sweep on a database another is writing is refused,
// instead of running the same points side by side.
TEST(HostileDatabase, ASecondWriterIsRefused) {
  TempDir dir;
  const std::string scenario =
      dir.write("s.yaml", kBase + "sweep:\n  wan[*].bandwidth: [1Gbps, 10Gbps]\n");
  const std::string db = dir.path("s.sqlite");
  ASSERT_EQ(cli({"sweep", scenario, "--db", db, "-j", "1"}).status, 0);
  {
    apps::ResultsDb writer(db, true);
    writer.lock_for_writing();
    const CliResult r = cli({"sweep", scenario, "--db", db, "-j", "1", "--resume"});
    EXPECT_EQ(r.status, apps::kBadInput);
    EXPECT_NE(r.err.find("the sweep database '" + db + "' is being written by another hgsim sweep"),
              std::string::npos)
        << r.err;
    // Readers are not writers.
    EXPECT_EQ(cli({"results", db}).status, 0);
  }
  EXPECT_EQ(cli({"sweep", scenario, "--db", db, "-j", "1", "--resume"}).status, 0);
}

// ---- the hgsim process -------------------------------------------------------------------

struct Process {
  int status = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
};

// Runs the hgsim binary with `env` added, stdout to `stdout_path` (a file of ours if empty).
Process run_binary(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                   const std::string& stdout_path = {}) {
  TempDir dir;
  const std::string out = stdout_path.empty() ? dir.path("out") : stdout_path;
  const std::string err = dir.path("err");
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(o, 1);
    ::dup2(e, 2);
    std::vector<char*> argv{const_cast<char*>(HGSIM_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(HGSIM_BINARY, argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  Process p;
  p.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::stringstream o, e;
  if (stdout_path.empty()) o << std::ifstream(out).rdbuf();
  e << std::ifstream(err).rdbuf();
  p.out = o.str();
  p.err = e.str();
  return p;
}

TEST(HgsimProcess, OutputThatCannotBeWrittenFailsTheCommand) {
  TempDir dir;
  const std::string scenario = dir.write("scenario.yaml", kBase);
  const Process full = run_binary({"check", scenario}, {}, "/dev/full");
  EXPECT_EQ(full.status, 1) << full.err;
  EXPECT_NE(full.err.find("cannot write the output: No space left on device"), std::string::npos)
      << full.err;
  const Process trace = run_binary({"run", scenario, "--trace", "/dev/full"});
  EXPECT_EQ(trace.status, 1) << trace.err;
  EXPECT_NE(trace.err.find("cannot write '/dev/full'"), std::string::npos) << trace.err;
  const Process graph =
      run_binary({"run", scenario, "--export-graph", dir.path("missing/graph.json")});
  EXPECT_EQ(graph.status, 1) << graph.err;
  EXPECT_NE(graph.err.find("No such file or directory"), std::string::npos) << graph.err;
}

TEST(HgsimProcess, WrittenFilesAreCompleteAndNoTemporaryStays) {
  TempDir dir;
  const std::string scenario = dir.write("scenario.yaml", kBase);
  const Process r = run_binary({"run", scenario, "--trace", dir.path("t.json"), "--export-graph",
                                dir.path("g.json"), "--export-platform", dir.path("p.xml")});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* name : {"t.json", "g.json"}) {
    std::stringstream text;
    text << std::ifstream(dir.path(name)).rdbuf();
    core::Json parsed;
    EXPECT_NO_THROW(parsed = core::Json::parse(text.str())) << name;
  }
  for (const auto& e : fs::directory_iterator(dir.dir()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
}

TEST(HgsimProcess, LimitsAreSetInTheEnvironment) {
  TempDir dir;
  const std::string scenario = dir.write("scenario.yaml", kBase);
  Process p = run_binary({"check", scenario}, {"HGSIM_MAX_INPUT_BYTES=100"});
  EXPECT_EQ(p.status, 1);
  EXPECT_NE(p.err.find("is larger than 100 B"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("HGSIM_MAX_INPUT_BYTES"), std::string::npos) << p.err;
  p = run_binary({"check", scenario}, {"HGSIM_MAX_GPUS=3"});
  EXPECT_EQ(p.status, 1);
  EXPECT_NE(p.err.find(":16:12: error: clusters[1].nodes: the clusters hold 4 GPUs"),
            std::string::npos)
      << p.err;
  p = run_binary({"check", scenario}, {"HGSIM_MAX_DOCUMENT_DEPTH=1"});
  EXPECT_EQ(p.status, 1);
  EXPECT_NE(p.err.find("nest more than 1 deep"), std::string::npos) << p.err;
  // 4 micro-batches x 2 stages x 2 replicas, a forward and a backward each: 32 nodes at
  // least, counted before anything is built and refused at the plan's micro_batches.
  p = run_binary({"run", scenario, "--fidelity", "full"}, {"HGSIM_MAX_GRAPH_NODES=30"});
  EXPECT_EQ(p.status, 1);
  EXPECT_NE(p.err.find(":29:22: error: strategy.pipelines[0].micro_batches: 4 micro-batches x 2 "
                       "stages x 2 replicas make an execution graph of more than 30 nodes"),
            std::string::npos)
      << p.err;
  EXPECT_NE(p.err.find("use --fidelity folded"), std::string::npos) << p.err;
  // Past that count the build finds the limit; folding is advised only where it is not folded.
  p = run_binary({"run", scenario, "--fidelity", "full"}, {"HGSIM_MAX_GRAPH_NODES=40"});
  EXPECT_EQ(p.status, 1);
  EXPECT_NE(p.err.find("grows past 40 nodes"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("use --fidelity folded"), std::string::npos) << p.err;
  p = run_binary({"run", scenario, "--fidelity", "folded"}, {"HGSIM_MAX_GRAPH_NODES=40"});
  EXPECT_EQ(p.status, 1);
  EXPECT_NE(p.err.find("it is folded already"), std::string::npos) << p.err;
  EXPECT_EQ(p.err.find("use --fidelity folded"), std::string::npos) << p.err;
  // A value that is not a positive number is ignored, with a warning.
  p = run_binary({"check", scenario}, {"HGSIM_MAX_GPUS=lots"});
  EXPECT_EQ(p.status, 0) << p.err;
  EXPECT_NE(p.err.find("ignoring HGSIM_MAX_GPUS='lots'"), std::string::npos) << p.err;
}

// Each limit variable is a whole number (HGSIM_MIN_TRACE_STEP_S: a number) within a range of
// its own; anything else is ignored with a warning that names the variable, the value (quoted
// as any input is), why and the range. Spaces around the number do not matter.
TEST(Limits, EachVariableIsReadWholeAndWithinItsRange) {
  auto refusal = [](const char* variable, const char* text) {
    return core::limit_refusal(variable, text).value_or("accepted");
  };
  EXPECT_EQ(refusal("HGSIM_MAX_DOCUMENT_DEPTH", "1e10"),
            "too large; expected a whole number from 1 to 5000");
  EXPECT_EQ(refusal("HGSIM_MAX_DOCUMENT_DEPTH", "5001"),
            "too large; expected a whole number from 1 to 5000");
  EXPECT_EQ(refusal("HGSIM_MAX_DOCUMENT_DEPTH", "5000"), "accepted");
  EXPECT_EQ(refusal("HGSIM_MAX_SWEEP_POINTS", "0.5"),
            "not a whole number; expected a whole number from 1 to 1000000000");
  EXPECT_EQ(refusal("HGSIM_MAX_SWEEP_POINTS", "1.5").substr(0, 18), "not a whole number");
  EXPECT_EQ(refusal("HGSIM_MAX_SWEEP_POINTS", "1e30").substr(0, 9), "too large");
  EXPECT_EQ(refusal("HGSIM_MAX_SWEEP_POINTS", "99999999999999999999999").substr(0, 9), "too large");
  EXPECT_EQ(refusal("HGSIM_MAX_SWEEP_POINTS", "inf").substr(0, 12), "not a number");
  EXPECT_EQ(refusal("HGSIM_MAX_SWEEP_POINTS", "nan").substr(0, 12), "not a number");
  EXPECT_EQ(refusal("HGSIM_MAX_SWEEP_POINTS", "0x10").substr(0, 12), "not a number");
  EXPECT_EQ(refusal("HGSIM_MAX_SWEEP_POINTS", "5 5").substr(0, 12), "not a number");
  EXPECT_EQ(refusal("HGSIM_MAX_SWEEP_POINTS", "-3").substr(0, 12), "not positive");
  EXPECT_EQ(refusal("HGSIM_MAX_SWEEP_POINTS", "0").substr(0, 12), "not positive");
  for (const char* spaced : {" 5", "5 ", " 5\n", "\t5", "1e3"})
    EXPECT_EQ(refusal("HGSIM_MAX_SWEEP_POINTS", spaced), "accepted") << spaced;
  // Below 64 MiB SimGrid's own start-up allocations fail (it aborts instead of reporting).
  EXPECT_EQ(refusal("HGSIM_MAX_MEMORY_BYTES", "1"),
            "too small; expected a whole number from 67108864 to 1125899906842624");
  EXPECT_EQ(refusal("HGSIM_MAX_CODEC_ELEMENTS", "9e18").substr(0, 9), "too large");
  EXPECT_EQ(refusal("HGSIM_MAX_CODEC_ELEMENTS", "1099511627776"), "accepted");  // 2^40
  EXPECT_EQ(refusal("HGSIM_MIN_TRACE_STEP_S", "0.0005"), "accepted");
  EXPECT_EQ(refusal("HGSIM_MIN_TRACE_STEP_S", "1e-12"),
            "too small; expected a number from 1e-09 to 86400");
  // At the most a variable may be, the hint does not offer to raise it.
  EXPECT_EQ(core::limit_hint("HGSIM_MAX_DOCUMENT_DEPTH", 5000),
            "the limit is 5000, the most HGSIM_MAX_DOCUMENT_DEPTH may be (docs/limits.md)");
  EXPECT_EQ(core::limit_hint("HGSIM_MAX_DOCUMENT_DEPTH", 64),
            "the limit is 64; set HGSIM_MAX_DOCUMENT_DEPTH to raise it (docs/limits.md)");
}

TEST(HgsimProcess, ALimitOutsideItsRangeIsIgnoredWithAWarning) {
  TempDir dir;
  const std::string scenario = dir.write("scenario.yaml", kBase);
  struct Case {
    std::string setting;
    std::string warning;
  };
  const std::vector<Case> cases = {
      {"HGSIM_MAX_DOCUMENT_DEPTH=1e10",
       "hgsim: warning: ignoring HGSIM_MAX_DOCUMENT_DEPTH='1e10': too large; expected a whole "
       "number from 1 to 5000; the default 64 stays"},
      {"HGSIM_MAX_DOCUMENT_DEPTH=0.5", "HGSIM_MAX_DOCUMENT_DEPTH='0.5': not a whole number"},
      {"HGSIM_MAX_SWEEP_POINTS=1e30", "HGSIM_MAX_SWEEP_POINTS='1e30': too large"},
      {"HGSIM_MAX_MEMORY_BYTES=1", "HGSIM_MAX_MEMORY_BYTES='1': too small"},
      {"HGSIM_MAX_GPUS=3\x1b[2J" + std::string(100, 'x'), "HGSIM_MAX_GPUS='3\\x1b[2J"},
  };
  for (const Case& c : cases) {
    Process p = run_binary({"check", scenario}, {c.setting});
    EXPECT_EQ(p.status, 0) << c.setting << "\n" << p.err;
    EXPECT_NE(p.err.find(c.warning), std::string::npos) << c.setting << "\n" << p.err;
    EXPECT_EQ(p.err.find('\x1b'), std::string::npos) << p.err;
    EXPECT_LT(p.err.find('\n'), 300u) << p.err;
  }
  // Spaces around a number are read alike on either side.
  for (const std::string spaced : {"HGSIM_MAX_GPUS= 3", "HGSIM_MAX_GPUS=3 "}) {
    Process p = run_binary({"check", scenario}, {spaced});
    EXPECT_EQ(p.status, 1) << spaced;
    EXPECT_NE(p.err.find("the clusters hold 4 GPUs"), std::string::npos) << spaced << p.err;
  }
  // HGSIM_MAX_MEMORY_BYTES at its floor still runs a simulation (SimGrid starts; below it,
  // SimGrid's own first allocation failed and it aborted with a backtrace), and a
  // simulation that needs more says so, exit 1.
  Process p = run_binary({"run", scenario}, {"HGSIM_MAX_MEMORY_BYTES=67108864"});
  EXPECT_EQ(p.status, 0) << p.err;
  EXPECT_EQ(p.err.find("CRITICAL"), std::string::npos) << p.err;
#if !defined(__SANITIZE_ADDRESS__)
  // (An address-sanitized hgsim runs without the memory limit: sim/simulate.cpp.)
  const std::string large =
      (fs::path(HGSIM_SOURCE_DIR) / "scenarios" / "scale" / "astra-gpt-6.7b-128.yaml").string();
  p = run_binary({"run", large, "--fidelity", "full"}, {"HGSIM_MAX_MEMORY_BYTES=67108864"});
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_NE(p.err.find("the simulation ran out of memory (it may use 64 MiB)"), std::string::npos)
      << p.err;
  EXPECT_EQ(p.err.find("CRITICAL"), std::string::npos) << p.err;
  EXPECT_EQ(p.err.find("a bug in hgsim"), std::string::npos) << p.err;
#endif
}

// hgsim codecs takes 16 bytes an element: a --size past HGSIM_MAX_MEMORY_BYTES is refused
// before anything is allocated, naming the size and the limit (it was std::bad_alloc, an
// "internal error", exit 2).
TEST(HgsimProcess, CodecsRefuseASizeThatDoesNotFitInTheMemoryLimit) {
  Process p = run_binary({"codecs", "--size", "1000000000000"}, {"HGSIM_MAX_CODEC_ELEMENTS=1e12"});
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_NE(p.err.find("hgsim codecs: --size 1000000000000: needs about 14.55 TiB of memory"),
            std::string::npos)
      << p.err;
  EXPECT_NE(p.err.find("HGSIM_MAX_MEMORY_BYTES"), std::string::npos) << p.err;
  EXPECT_EQ(p.err.find("internal error"), std::string::npos) << p.err;
  // A value past HGSIM_MAX_CODEC_ELEMENTS's range leaves its default in force.
  p = run_binary({"codecs", "--size", "1000000000000"}, {"HGSIM_MAX_CODEC_ELEMENTS=9e18"});
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_NE(p.err.find("HGSIM_MAX_CODEC_ELEMENTS='9e18': too large"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("--size: must be an integer from 1 to 268435456"), std::string::npos)
      << p.err;
}

// Documents nested as deep as the depth limit may be set are read without exhausting the
// stack (the readers recurse once a level) and refused for what they are; YAML deeper than
// yaml-cpp reads is said to be so, without offering a limit that would not help.
TEST(HgsimProcess, TheDeepestDocumentTheLimitAllowsIsReadSafely) {
  TempDir dir;
  const std::string deep = std::string(4999, '[') + std::string(4999, ']');
  std::string json = "{\"name\": \"t\", \"extra\": " + deep + "}";
  const std::string scenario = dir.write("deep.json", json);
  Process p = run_binary({"check", scenario}, {"HGSIM_MAX_DOCUMENT_DEPTH=5000"});
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_NE(p.err.find("unknown key 'extra'"), std::string::npos) << p.err.substr(0, 500);
  p = run_binary({"check", dir.write("deeper.json", "[[" + deep + "]]")},
                 {"HGSIM_MAX_DOCUMENT_DEPTH=5000"});
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_NE(p.err.find("nest more than 5000 deep; the limit is 5000, the most"), std::string::npos)
      << p.err.substr(0, 500);
  const std::string yaml = dir.write("deep.yaml", std::string(600, '[') + std::string(600, ']'));
  p = run_binary({"check", yaml}, {"HGSIM_MAX_DOCUMENT_DEPTH=5000"});
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_NE(p.err.find("nest deeper than the YAML reader goes"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("write the document as JSON"), std::string::npos) << p.err;
  p = run_binary({"check", yaml});
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_NE(p.err.find("nest more than 64 deep; the limit is 64; set HGSIM_MAX_DOCUMENT_DEPTH"),
            std::string::npos)
      << p.err;
}

// fidelity: auto keeps full fidelity while the full graph fits its node budget (the lower of
// sim::full_fidelity_max_graph_nodes and HGSIM_MAX_GRAPH_NODES) and folds past it, exactly
// at the graph's own node count; a fidelity asked for is never changed.
TEST(HgsimProcess, AutomaticFidelityFoldsExactlyPastTheGraphBudget) {
  TempDir dir;
  const std::string scenario = dir.write("scenario.yaml", kBase);
  auto run = [&](const std::string& fidelity, std::int64_t limit) {
    Process p = run_binary({"run", scenario, "--json", "--fidelity", fidelity},
                           {"HGSIM_MAX_GRAPH_NODES=" + std::to_string(limit)});
    core::Json j;
    if (p.status == 0) j = core::Json::parse(p.out);
    return std::make_pair(p, j);
  };
  const auto [full_p, full] = run("full", 1'000'000);
  const auto [folded_p, folded] = run("folded", 1'000'000);
  ASSERT_EQ(full_p.status, 0) << full_p.err;
  ASSERT_EQ(folded_p.status, 0) << folded_p.err;
  // The least limit full fidelity builds under (bisection): the full graph's size.
  std::int64_t fails = 1, builds = 1'000'000;
  while (builds - fails > 1) {
    const std::int64_t mid = (fails + builds) / 2;
    (run("full", mid).first.status == 0 ? builds : fails) = mid;
  }
  ASSERT_EQ(run("full", fails).first.status, 1);

  const auto [at_p, at] = run("auto", builds);
  ASSERT_EQ(at_p.status, 0) << at_p.err;
  EXPECT_EQ(at["simulator"]["fidelity"], "full");
  EXPECT_EQ(at["iteration_time_s"], full["iteration_time_s"]);
  EXPECT_EQ(at_p.err.find("fidelity auto"), std::string::npos) << at_p.err;

  const auto [past_p, past] = run("auto", fails);
  ASSERT_EQ(past_p.status, 0) << past_p.err;
  EXPECT_EQ(past["simulator"]["fidelity"], "folded");
  EXPECT_EQ(past["iteration_time_s"], folded["iteration_time_s"]);
  EXPECT_NE(past_p.err.find("fidelity auto: the full graph would have more than " +
                            std::to_string(fails) + " nodes"),
            std::string::npos)
      << past_p.err;
}

TEST(HgsimProcess, TraceRowLimitAndStep) {
  TempDir dir;
  dir.write("bw.csv", "0,1Gbps\n1,2Gbps\n2,1Gbps\n3,2Gbps\n");
  const std::string scenario =
      dir.write("scenario.yaml",
                replaced(kBase, "    latency: 15ms\n", "    latency: 15ms\n    trace: bw.csv\n"));
  Process p = run_binary({"check", scenario}, {"HGSIM_MAX_TRACE_ROWS=3"});
  EXPECT_EQ(p.status, 1);
  EXPECT_NE(p.err.find("bw.csv:4:1: error: wan[0].trace: the bandwidth trace has more than 3 rows"),
            std::string::npos)
      << p.err;
  p = run_binary({"check", scenario}, {"HGSIM_MIN_TRACE_STEP_S=2"});
  EXPECT_EQ(p.status, 1);
  EXPECT_NE(p.err.find("bw.csv:2:1: error"), std::string::npos) << p.err;
}

// The simulator child of a killed `hgsim run` must not stay behind: SIGTERM is passed on,
// and SIGKILL (which nothing can catch) ends it through PR_SET_PDEATHSIG.
pid_t first_child_of(pid_t parent, std::chrono::seconds patience) {
  const auto until = std::chrono::steady_clock::now() + patience;
  const std::string file =
      "/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) + "/children";
  while (std::chrono::steady_clock::now() < until) {
    std::ifstream in(file);
    pid_t child = 0;
    if (in >> child && child > 0) return child;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return 0;
}

bool gone(pid_t pid, std::chrono::seconds patience) {
  const auto until = std::chrono::steady_clock::now() + patience;
  while (std::chrono::steady_clock::now() < until) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string ignored, state;
    if (!(stat >> ignored >> ignored >> state) || state == "Z") return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(HgsimProcess, TheSimulatorDiesWithHgsim) {
  const std::string scenario =
      (fs::path(HGSIM_SOURCE_DIR) / "scenarios" / "scale" / "hetero-256-full.yaml").string();
  for (int sig : {SIGTERM, SIGKILL}) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      ::execl(HGSIM_BINARY, HGSIM_BINARY, "run", scenario.c_str(), "--fidelity", "full",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const pid_t child = first_child_of(pid, std::chrono::seconds(60));
    ASSERT_GT(child, 0) << "hgsim run started no simulator process";
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << status;
    EXPECT_TRUE(gone(child, std::chrono::seconds(10))) << "signal " << sig << ": child " << child;
  }
}

// A forked child starts with empty tracking tables: a child that a signal ends neither
// removes its parent's temporary files nor signals its siblings. Played in a process of its
// own that installs the handlers, as the hgsim command does.
TEST(HgsimProcess, AChildEndedByASignalLeavesItsParentsFilesAlone) {
  const fs::path file =
      fs::temp_directory_path() / ("hgsim-process-" + std::to_string(::getpid()) + ".tmp");
  std::ofstream(file) << "being written";
  const pid_t pid = ::fork();
  if (pid == 0) {
    core::install_termination_handlers();
    core::track_temporary_file(file.string());
    int code = 0;
    try {
      core::reap_child(core::start_child([] {
                         ::raise(SIGTERM);
                         return std::string();
                       }),
                       "");
      code = 2;  // the child was meant to die of SIGTERM
    } catch (const core::ChildFailed& e) {
      code = std::string(e.what()).find("signal 15") != std::string::npos ? 0 : 3;
    }
    if (code == 0 && !fs::exists(file)) code = 4;  // the child removed the parent's file
    core::untrack_temporary_file(file.string());
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "2: the child lived; 3: not killed by SIGTERM; 4: the parent's file was removed";
  fs::remove(file);
}

// ---- --trace-filter against the scenario and the plan --------------------------------

// A filter that could match nothing is refused (it wrote an empty trace, exit 0).
TEST(TraceFilterFlag, NamesOnlyClustersAndStagesThePlanHasAndNeedsATrace) {
  TempDir dir;
  const std::string file = dir.write("scenario.yaml", kBase);
  const std::string trace = dir.path("t.json");
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--trace", trace, "--trace-filter", "cluster=eats"},
       "--trace-filter: cluster=eats: no such cluster; did you mean 'east'?"},
      {{"--trace", trace, "--trace-filter", "stage=2"},
       "--trace-filter: stage=2: the plan has 2 stages (0 to 1)"},
      {{"--trace", trace, "--trace-filter", "stage=99999999999999999999"},
       "stage=99999999999999999999: expected a stage number"},
      {{"--trace", trace, "--trace-filter", "kind=\x1b[31m"}, "kind=\\x1b[31m: no such kind"},
      {{"--trace-filter", "stage=0"}, "no --trace is given"},
  };
  for (const auto& [flags, says] : cases) {
    std::vector<std::string> words{"run", file};
    words.insert(words.end(), flags.begin(), flags.end());
    const CliResult r = cli(words);
    EXPECT_EQ(r.status, apps::kBadInput) << says;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(trace)) << says;
  }
  // Empty paths are refused, not read as "no file".
  for (const char* flag : {"--layer-profile", "--trace", "--plan", "--profile"}) {
    const CliResult r = cli({"run", file, flag, ""});
    EXPECT_EQ(r.status, apps::kBadInput) << flag;
    EXPECT_NE(r.err.find(std::string(flag) + ": expected a file path"), std::string::npos) << r.err;
  }
}

// ---- the TCP window warning ----------------------------------------------------------

// A WAN link its flows cannot fill: the warning gives each flow's cap (window / round trip,
// in bits per second) and a window that would fill the link, both checked against the
// closed form here.
TEST(WindowWarning, SaysEachFlowsCapAndAWindowThatFillsTheLink) {
  TempDir dir;
  const std::string file = dir.write(
      "scenario.yaml",
      replaced(kBase, "    latency: 15ms\n", "    latency: 50ms\n    tcp_window: 64KiB\n"));
  const CliResult r = cli({"run", file});
  ASSERT_EQ(r.status, 0) << r.err;
  std::smatch m;
  const std::regex warning(
      "WAN link wan:east->west \\(10Gbps\\) is not filled: at most ([0-9]+) flows? at once, each "
      "capped by the TCP window at ([0-9.]+) Mbit/s \\(window / round trip\\); "
      "wan\\[0\\]\\.tcp_window: ([0-9.]+)(kB|MB|GB) would fill it");
  ASSERT_TRUE(std::regex_search(r.err, m, warning)) << r.err;
  const int flows = std::stoi(m[1]);
  // One flow: 64 KiB per round trip of 2 x (50 ms + the NICs' 2 x 2 us).
  const double rtt = 2 * (0.050 + 4e-6);
  EXPECT_NEAR(std::stod(m[2]), 65536 * 8 / rtt / 1e6, 0.001);
  const double scale = m[4] == "kB" ? 1e3 : m[4] == "MB" ? 1e6 : 1e9;
  const double window = std::stod(m[3]) * scale;
  const double exact = 65536 * 1.25e9 / (65536 / rtt * flows);
  EXPECT_GE(window, exact);
  EXPECT_LE(window, exact * 1.01);  // rounded up to three significant digits
}

// ---- command-line flags: every number is checked whole, finite and in range ----------

struct FlagCase {
  std::vector<std::string> words;  // after "hgsim"
  std::string message;             // what stderr says
};

void PrintTo(const FlagCase& c, std::ostream* os) {
  for (const auto& w : c.words) *os << w << " ";
}

const FlagCase kFlagCases[] = {
    // These crashed (SIGFPE), ran out of memory, or measured nothing and exited 0.
    {{"profile", "--device", "cpu", "--tp", "0", "--out", "x.json"},
     "--tp: must be an integer from 1 to 64, found 0"},
    {{"profile", "--device", "cpu", "--tp", "2,-1", "--out", "x.json"}, "found -1"},
    {{"profile", "--device", "cpu", "--micro-batches", "100000000", "--out", "x.json"},
     "--micro-batches: must be an integer from 1 to 1024"},
    {{"profile", "--device", "cpu", "--micro-batches", "0", "--out", "x.json"}, "found 0"},
    {{"profile", "--device", "cpu", "--seq-len", "1000000000", "--out", "x.json"},
     "--seq-len: must be an integer from 1 to 131072"},
    {{"profile", "--device", "cpu", "--seq-len", "-1", "--out", "x.json"}, "found -1"},
    {{"profile", "--device", "cpu", "--micro-batches", "1024", "--seq-len", "131072", "--out",
      "x.json"},
     "134217728 tokens per op"},
    {{"profile", "--device", "cpu", "--tp", "3", "--models", "gpt2-124m", "--out", "x.json"},
     "--tp 3 divides the heads"},
    {{"profile", "--device", "cpu", "--models", "gpt9", "--out", "x.json"}, "unknown model 'gpt9'"},
    {{"profile", "--device", "cpu", "--dtype", "fp16", "--out", "x.json"},
     "apply to --device cuda only"},
    {{"profile", "--device", "cpu", "--dtype", "fp7", "--out", "x.json"}, "fp7 not in"},
    {{"profile", "--device", "cpu", "--seconds-per-entry", "nan", "--out", "x.json"},
     "expected a finite number, found 'nan'"},
    {{"profile", "--device", "cpu", "--seconds-per-entry", "-1", "--out", "x.json"},
     "must be > 0 and at most 60, found -1"},
    {{"profile", "--device", "cpu", "--profile", "p.json", "--out", "x.json"},
     "--profile applies to --check-layers only"},
    {{"codecs", "--size", "4294967296"}, "--size: must be an integer from 1 to 268435456"},
    {{"codecs", "--size", "1e3"}, "expected an integer, found '1e3'"},
    {{"plan", "s.yaml", "--time-budget", "nan"}, "--time-budget: expected a finite number"},
    {{"plan", "s.yaml", "--time-budget", "0"}, "must be > 0 and at most 2592000, found 0"},
    {{"plan", "s.yaml", "--verify", "0"}, "--verify: must be an integer from 1 to 100"},
    {{"sweep", "s.yaml", "--time-budget", "inf"}, "--time-budget: expected a finite number"},
    {{"sweep", "s.yaml", "--point", "-1"}, "--point: must be an integer from 0"},
    {{"sweep", "s.yaml", "-j", "99999999999999999999"}, "--jobs: must be an integer from 1 to"},
    {{"gpus", "--efficiency", "--json"}, "excludes"},
    // Refused before the simulation runs (it used to run, then fail in the plotter).
    {{"run", "s.yaml", "--plot", "x.jpg"}, "--plot: 'x.jpg': expected FILE.png or FILE.svg"},
    {{"run", "s.yaml", "--plot", "/nonexistent-hgsim-dir/x.png"},
     "no folder '/nonexistent-hgsim-dir' to write it in"},
};

class HostileFlags : public ::testing::TestWithParam<FlagCase> {};

TEST_P(HostileFlags, AreRefusedBeforeAnyWork) {
  const FlagCase& c = GetParam();
  const CliResult r = cli(c.words);
  EXPECT_EQ(r.status, apps::kBadInput) << r.err;
  EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  // Figures as typed: no 1.79769e+308 or 0.000000 from a generic range check.
  EXPECT_EQ(r.err.find("e+308"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("0.000000"), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Cases, HostileFlags, ::testing::ValuesIn(kFlagCases));

// Usage errors repeat what was typed (a value, a flag, a subcommand, a path) quoted as any
// input is: escaped, cut to 60 characters, never raw bytes a terminal acts on, and a
// subcommand that does not exist is named with the ones that do.
const FlagCase kUsageCases[] = {
    {{"frobnicate"},
     "hgsim: unknown subcommand 'frobnicate' of hgsim; valid: check, models, gpus, run"},
    {{"chek", "s.yaml"}, "unknown subcommand 'chek' of hgsim; did you mean 'check'?"},
    {{"\xff"}, "unknown subcommand '\\xff' of hgsim"},
    {{"validate", "nosuch"}, "unknown subcommand 'nosuch' of hgsim validate; valid: live"},
    {{"validate"}, "hgsim validate needs a subcommand; valid: live"},
    {{}, "hgsim: a subcommand is required; valid: check, models"},
    {{"run", "s.yaml", "--fidelity", "a\x1b[2Jb"}, "--fidelity: 'a\\x1b[2Jb' not in"},
    {{"run", "s.yaml", "--fidelity=\xff"}, "--fidelity: '\\xff' not in"},
    {{"run", "s.yaml", "--fidelity", std::string(100000, 'f')},
     "--fidelity: '" + std::string(60, 'f') + "... (100000 characters)' not in"},
    {{"check", "s.yaml",
      "--a\x1b"
      "b"},
     "'--a\\x1b"
     "b'"},
    {{"check", "s.yaml", "--" + std::string(100000, 'a')}, "... (100002 characters)'"},
    {{"check", "s.yaml",
      "\xe2\x80\xae"
      "txt"},
     "'\\u202etxt'"},
};

class UsageErrors : public ::testing::TestWithParam<FlagCase> {};

TEST_P(UsageErrors, QuoteWhatTheyRepeat) {
  const FlagCase& c = GetParam();
  const CliResult r = cli(c.words);
  EXPECT_EQ(r.status, apps::kBadInput) << r.err;
  EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err.substr(0, 1000);
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\xff'), std::string::npos) << r.err;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) EXPECT_LT(line.size(), 500u) << line;
}

INSTANTIATE_TEST_SUITE_P(Cases, UsageErrors, ::testing::ValuesIn(kUsageCases));

// A path from the command line is shown escaped, and a long one by its ends, wherever a
// message repeats it (the file:line: prefix, "cannot open file '...'").
TEST(UsageErrorPaths, AreShownEscapedAndByTheirEnds) {
  CliResult r = cli({"check", "/nonexistent-hgsim/x\x1b[2J\xff.yaml"});
  EXPECT_EQ(r.status, apps::kBadInput);
  EXPECT_NE(r.err.find("/nonexistent-hgsim/x\\x1b[2J\\xff.yaml: error: cannot open file "
                       "'/nonexistent-hgsim/x\\x1b[2J\\xff.yaml'"),
            std::string::npos)
      << r.err;
  r = cli({"check", std::string(100000, 'a') + "-end.yaml"});
  EXPECT_EQ(r.status, apps::kBadInput);
  EXPECT_NE(r.err.find("-end.yaml (100009 characters): error: cannot open"), std::string::npos)
      << r.err.substr(0, 1000);
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) EXPECT_LT(line.size(), 600u) << line;
}

// ---- sweeps checked one point at a time ----------------------------------------------

// --list (and check, run, plan) check every point one at a time and keep none: 10 000
// points of a 100 kB scenario held at once took 1.6 GB. The listing is what the points the
// whole-grid check keeps say, point by point, with each point's index in --json.
TEST(SweepList, ListsWhatTheWholeGridCheckFindsPointByPoint) {
  const std::string file =
      (fs::path(HGSIM_SOURCE_DIR) / "scenarios" / "examples" / "four-regions-sweep.yaml").string();
  core::Diagnostics diags;
  const auto points = apps::check_scenario_file(file, diags);
  ASSERT_TRUE(points) << diags.format();
  ASSERT_GT(points->size(), 1u);
  const CliResult text = cli({"sweep", file, "--list"});
  ASSERT_EQ(text.status, apps::kSuccess) << text.err;
  std::istringstream lines(text.out);
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, std::to_string(points->size()) + " sweep points, each valid:");
  for (std::size_t k = 0; k < points->size(); ++k) {
    ASSERT_TRUE(std::getline(lines, line)) << k;
    std::ostringstream want;
    want << "  " << std::setw(3) << k << "  ";
    for (const auto& [path, value] : (*points)[k].settings) want << path << "=" << value << "  ";
    EXPECT_EQ(line, want.str());
  }
  const CliResult json = cli({"sweep", file, "--list", "--json"});
  ASSERT_EQ(json.status, apps::kSuccess) << json.err;
  const core::Json listed = core::Json::parse(json.out)["points"];
  ASSERT_EQ(listed.size(), points->size());
  for (std::size_t k = 0; k < points->size(); ++k) {
    EXPECT_EQ(listed[k]["point"], k);
    for (const auto& [path, value] : (*points)[k].settings)
      EXPECT_EQ(listed[k]["settings"][path], core::Json::parse(value)) << k << " " << path;
  }
}

// Each point reaches the caller as it is checked, before the next is made: a grid whose
// last point is bad has handed over every point before it when that point's error comes.
TEST(SweepList, HandsEachPointOverAsItIsChecked) {
  TempDir dir;
  const std::string file =
      dir.write("s.yaml", kBase + "sweep:\n  training.seq_len: [64, 128, 256, 512, 0]\n");
  core::Diagnostics diags;
  std::vector<std::size_t> seen;
  const auto count =
      apps::check_scenario_file_each(file, diags, [&](std::size_t k, apps::CheckedPoint& p) {
        EXPECT_EQ(diags.error_count(), 0) << "point " << k << " came after the bad point";
        EXPECT_EQ(p.checked.scenario.training.seq_len, 64 << k);
        seen.push_back(k);
      });
  EXPECT_FALSE(count);
  EXPECT_EQ(seen, (std::vector<std::size_t>{0, 1, 2, 3}));
  EXPECT_NE(diags.format().find("training.seq_len=0"), std::string::npos) << diags.format();
}

// --list --point K lists point K (after checking every point); --list --resume is refused,
// since --list runs nothing.
TEST(SweepList, HonoursPointAndRefusesResume) {
  TempDir dir;
  const std::string file =
      dir.write("s.yaml", kBase + "sweep:\n  wan[*].bandwidth: [1Gbps, 2Gbps, 3Gbps]\n");
  CliResult r = cli({"sweep", file, "--list", "--point", "2"});
  ASSERT_EQ(r.status, apps::kSuccess) << r.err;
  EXPECT_EQ(r.out, "3 sweep points, each valid; point 2:\n    2  wan[*].bandwidth=\"3Gbps\"  \n");
  r = cli({"sweep", file, "--list", "--point", "1", "--json"});
  ASSERT_EQ(r.status, apps::kSuccess) << r.err;
  EXPECT_EQ(core::Json::parse(r.out),
            core::Json::parse(
                R"({"points": [{"point": 1, "settings": {"wan[*].bandwidth": "2Gbps"}}]})"));
  r = cli({"sweep", file, "--list", "--point", "3"});
  EXPECT_EQ(r.status, apps::kBadInput);
  EXPECT_NE(r.err.find("--point 3: the sweep has 3 points (0 to 2)"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
  r = cli({"sweep", file, "--list", "--resume"});
  EXPECT_EQ(r.status, apps::kBadInput);
  EXPECT_NE(r.err.find("--list only checks and lists the points"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(apps::default_sweep_db(file)));
}

// check --summary of a sweep shows point 0 and says so; --json and --summary exclude.
TEST(CheckSummary, OfASweepSaysItShowsPointZero) {
  TempDir dir;
  const std::string file =
      dir.write("s.yaml", kBase + "sweep:\n  wan[*].bandwidth: [1Gbps, 2Gbps, 3Gbps]\n");
  CliResult r = cli({"check", file, "--summary"});
  ASSERT_EQ(r.status, apps::kSuccess) << r.err;
  EXPECT_NE(r.out.find("sweep point 0 of 3: wan[*].bandwidth=\"1Gbps\""), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("WAN east <-> west: 1 Gbit/s"), std::string::npos) << r.out;
  r = cli({"check", dir.write("one.yaml", kBase), "--summary"});
  ASSERT_EQ(r.status, apps::kSuccess) << r.err;
  EXPECT_EQ(r.out.find("sweep point"), std::string::npos) << r.out;
  r = cli({"check", file, "--summary", "--json"});
  EXPECT_EQ(r.status, apps::kBadInput);
  EXPECT_NE(r.err.find("excludes"), std::string::npos) << r.err;
}

// ---- a refused value is reported once ------------------------------------------------

// A global_batch the reader refuses leaves 0 in its place; the plan's batch check does not
// report that 0 as a second error.
TEST(RefusedGlobalBatch, IsOneError) {
  TempDir dir;
  for (const char* value : {"8.5", "-8", "true", "0"}) {
    const std::string file = dir.write(
        "s.yaml",
        replaced(kBase, "global_batch: 8\n", std::string("global_batch: ") + value + "\n"));
    core::Diagnostics diags;
    EXPECT_FALSE(apps::check_scenario_file(file, diags));
    EXPECT_EQ(diags.error_count(), 1) << value << "\n" << diags.format();
    EXPECT_NE(diags.format().find("training.global_batch"), std::string::npos) << diags.format();
  }
}

// ---- the zip example the messages give ------------------------------------------------

// The zip group shown in the hints is valid YAML and a valid sweep; written unquoted in
// flow style (where YAML reads [*] as an alias), the YAML error says to quote the keys.
TEST(ZipExample, ParsesAndTheUnquotedFormSaysToQuote) {
  core::Diagnostics diags;
  const auto document =
      core::parse_yaml(kBase + "sweep:\n  " + core::kSweepZipExample + "\n", "s.yaml", diags);
  ASSERT_TRUE(document) << diags.format();
  const core::SweepGrid grid(*document, diags);
  EXPECT_FALSE(diags.has_errors()) << diags.format();
  EXPECT_EQ(grid.size(), 2u);
  EXPECT_EQ(grid.axis_paths(), (std::vector<std::string>{"wan[*].bandwidth", "wan[*].latency"}));
  core::Diagnostics bad;
  EXPECT_FALSE(core::parse_yaml(
      kBase + "sweep:\n  zip: {wan[*].bandwidth: [1Gbps, 10Gbps], wan[*].latency: [5ms, 1ms]}\n",
      "s.yaml", bad));
  EXPECT_NE(bad.format().find("a key with [*] must be quoted"), std::string::npos) << bad.format();
  // The hint a bad zip group gets shows the same example.
  core::Diagnostics hinted;
  EXPECT_FALSE(apps::check_scenario_document(
      *core::parse_yaml(kBase + "sweep:\n  zip: 3\n", "s.yaml", hinted), "s.yaml", hinted));
  EXPECT_NE(hinted.format().find(core::kSweepZipExample), std::string::npos) << hinted.format();
}

// ---- --trace-filter: keys that match nothing together ---------------------------------

// Each key matches something alone, but not together: refused, naming the combination, and
// no trace is written (it wrote an empty trace, exit 0).
TEST(TraceFilterFlag, RefusesKeysThatTogetherMatchNothing) {
  TempDir dir;
  const std::string file = dir.write("scenario.yaml", kBase);
  const std::string trace = dir.path("t.json");
  const std::pair<std::string, std::string> cases[] = {
      {"cluster=east,stage=1", "cluster=east,stage=1: no stage named runs in a cluster named"},
      {"kind=codec", "--trace-filter kind=codec: the plan's trace has no slice"},
      {"tracks=wan,kind=forward", "--trace-filter tracks=wan,kind=forward: the plan's trace"},
  };
  for (const auto& [filter, says] : cases) {
    const CliResult r = cli({"run", file, "--trace", trace, "--trace-filter", filter});
    EXPECT_EQ(r.status, apps::kBadInput) << filter;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(trace)) << filter;
  }
  // What does match: the stage a cluster runs, the WAN tracks, pipeline transfers on them.
  for (const char* filter : {"cluster=west,stage=1", "tracks=wan", "tracks=wan,kind=pp_comm",
                             "cluster=east,cluster=west,stage=1"}) {
    const CliResult r = cli({"run", file, "--trace", trace, "--trace-filter", filter});
    EXPECT_EQ(r.status, apps::kSuccess) << filter << "\n" << r.err;
    std::ifstream in(trace);
    const core::Json written = core::Json::parse(in);
    int slices = 0;
    for (const auto& e : written["traceEvents"]) slices += e["ph"] == "X";
    EXPECT_GT(slices, 0) << filter;
    fs::remove(trace);
  }
}

// Bubbles are slices too (written at the end, not by a graph node): kind=bubble keeps them,
// and only them, rather than being refused as matching nothing.
TEST(TraceFilterFlag, KindBubbleKeepsTheBubbles) {
  TempDir dir;
  const std::string file =
      (fs::path(HGSIM_SOURCE_DIR) / "scenarios" / "examples" / "explicit-plan.yaml").string();
  const std::string trace = dir.path("t.json");
  const CliResult r = cli({"run", file, "--trace", trace, "--trace-filter", "kind=bubble"});
  ASSERT_EQ(r.status, apps::kSuccess) << r.err;
  std::ifstream in(trace);
  const core::Json written = core::Json::parse(in);
  int bubbles = 0, others = 0;
  for (const auto& e : written["traceEvents"])
    if (e["ph"] == "X") (e["cat"] == "bubble" ? bubbles : others) += 1;
  EXPECT_GT(bubbles, 0);
  EXPECT_EQ(others, 0);
}

// ---- what --export-graph and --export-platform say -------------------------------------

// The graph lists each dependency once (a join reached twice from one node listed it
// twice), and every successor is a node; the platform's header names the fidelity and, when
// folded, what a host named ...xN stands for.
TEST(Exports, ListEachEdgeOnceAndNameTheFidelity) {
  TempDir dir;
  const std::string file = dir.write("scenario.yaml", kBase);
  for (const char* fidelity : {"full", "folded"}) {
    const std::string graph = dir.path(std::string(fidelity) + ".json");
    const std::string platform = dir.path(std::string(fidelity) + ".xml");
    const CliResult r = cli({"run", file, "--fidelity", fidelity, "--export-graph", graph,
                             "--export-platform", platform});
    ASSERT_EQ(r.status, apps::kSuccess) << r.err;
    std::ifstream in(graph);
    const core::Json nodes = core::Json::parse(in)["nodes"];
    ASSERT_GT(nodes.size(), 0u);
    for (const auto& n : nodes) {
      const auto next = n["successors"].get<std::vector<std::size_t>>();
      EXPECT_TRUE(std::adjacent_find(next.begin(), next.end(),
                                     [](auto a, auto b) { return a >= b; }) == next.end())
          << n.dump();
      for (std::size_t s : next) EXPECT_LT(s, nodes.size());
    }
    std::ifstream xml_in(platform);
    const std::string xml((std::istreambuf_iterator<char>(xml_in)), {});
    EXPECT_NE(xml.find(std::string("<!-- Fidelity: ") + fidelity + "."), std::string::npos)
        << xml.substr(0, 800);
    EXPECT_LT(xml.find("<!-- Fidelity"), xml.find("<platform ")) << xml.substr(0, 800);
    if (std::string(fidelity) == "folded") {
      EXPECT_NE(xml.find("x2\""), std::string::npos) << "a host folding 2 GPUs";
      EXPECT_NE(xml.find("standing for N identical GPUs"), std::string::npos);
    } else {
      EXPECT_NE(xml.find("Every host is one GPU."), std::string::npos);
    }
  }
}

// ---- outputs that are special files, a hostile environment, a database that refuses ------

// A FIFO that nothing reads is refused at once for every output flag (opening it for writing
// waited for a reader forever), and nothing else is left beside it; a FIFO that something
// reads is written whole, like a shell's >(...).
TEST(SpecialOutputs, AFifoThatNothingReadsIsRefusedForEveryOutputFlag) {
  TempDir dir;
  const std::string scenario = dir.write("scenario.yaml", kBase);
  const std::string fifo = dir.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::vector<std::vector<std::string>> commands = {
      {"run", scenario, "--trace", fifo},
      {"run", scenario, "--export-platform", fifo},
      {"run", scenario, "--export-graph", fifo},
      {"plan", scenario, "--out", fifo, "--time-budget", "1"},
  };
  for (const auto& words : commands) {
    const CliResult r = cli(words);
    EXPECT_EQ(r.status, apps::kBadInput) << words[2] << ": " << r.err;
    EXPECT_NE(
        r.err.find("cannot write '" + fifo + "': it is a FIFO (named pipe) that nothing reads"),
        std::string::npos)
        << words[2] << ": " << r.err;
  }
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.dir())) ++entries;
  EXPECT_EQ(entries, 2u) << "the scenario and the FIFO, no temporary file";
  // The same rule, asked directly, for the other kinds.
  EXPECT_EQ(core::output_refusal(dir.path("new.json")), std::nullopt);
  EXPECT_EQ(core::output_refusal(scenario), std::nullopt);
  EXPECT_EQ(core::output_refusal("/dev/null"), std::nullopt);
  ASSERT_TRUE(core::output_refusal(dir.dir().string()));
  EXPECT_NE(core::output_refusal(dir.dir().string())->find("it is a directory"), std::string::npos);
}

TEST(SpecialOutputs, AFifoThatSomethingReadsIsWrittenWhole) {
  TempDir dir;
  const std::string scenario = dir.write("scenario.yaml", kBase);
  const std::string fifo = dir.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  std::string read;
  std::thread drain([&] {
    ::fcntl(reader, F_SETFL, ::fcntl(reader, F_GETFL) & ~O_NONBLOCK);
    char buffer[4096];
    // Until the writer has been and gone: before it opens, read() says 0 too.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (std::chrono::steady_clock::now() < deadline) {
      const ssize_t n = ::read(reader, buffer, sizeof buffer);
      if (n > 0) {
        read.append(buffer, static_cast<std::size_t>(n));
      } else if (n == 0) {
        if (!read.empty()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      } else if (errno != EINTR) {
        break;
      }
    }
  });
  const CliResult r = cli({"run", scenario, "--export-graph", fifo});
  drain.join();
  ::close(reader);
  EXPECT_EQ(r.status, apps::kSuccess) << r.err;
  core::Json graph;
  EXPECT_NO_THROW(graph = core::Json::parse(read)) << read.substr(0, 200);
  EXPECT_TRUE(graph.contains("nodes"));
}

struct Limit {
  int resource;
  rlim_t soft;
  rlim_t hard;
};

// Runs the hgsim binary under `limits` (set in the child before exec, as a shell's ulimit
// does), with `env` added.
Process run_limited(const std::vector<std::string>& args, const std::vector<Limit>& limits,
                    const std::vector<std::string>& env = {}) {
  TempDir dir;
  const std::string out = dir.path("out");
  const std::string err = dir.path("err");
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::close(o);
    ::close(e);
    for (const Limit& l : limits) {
      const struct rlimit r { l.soft, l.hard };
      if (::setrlimit(l.resource, &r) != 0) ::_exit(126);
    }
    std::vector<char*> argv{const_cast<char*>(HGSIM_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(HGSIM_BINARY, argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  Process p;
  p.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::stringstream o, e;
  o << std::ifstream(out).rdbuf();
  e << std::ifstream(err).rdbuf();
  p.out = o.str();
  p.err = e.str();
  return p;
}

std::size_t lines_of(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

TEST(HostileEnvironment, ATmpdirThatIsNoFolderIsNamed) {
  TempDir dir;
  const std::string scenario = dir.write("scenario.yaml", kBase);
  const std::string missing = dir.path("no-such-folder");
  const Process p =
      run_limited({"run", scenario, "--plot", dir.path("p.png")}, {}, {"TMPDIR=" + missing});
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_NE(p.err.find("hgsim: the folder for temporary files, TMPDIR='" + missing +
                       "', cannot be used: No such file or directory: set TMPDIR to a folder"),
            std::string::npos)
      << p.err;
  EXPECT_EQ(p.err.find("internal error"), std::string::npos) << p.err;
  EXPECT_EQ(lines_of(p.err), 1u) << p.err;
}

// Each limit runs out somewhere else: opening the database or its WAL (4-5), the lock
// (6), a point's process (7-8; one inherited descriptor more, as under a build lock, moves
// each case down one). Every one names the limit and leaves no database behind.
TEST(HostileEnvironment, TooFewFileDescriptorsAreNamed) {
  TempDir dir;
  const std::string scenario =
      dir.write("s.yaml", kBase + "sweep:\n  wan[*].bandwidth: [1Gbps, 10Gbps]\n");
  int ran = 0;
#if defined(__SANITIZE_ADDRESS__)
  // The sanitizers' runtime needs descriptors of its own (UBSan's type checks report bad
  // vptrs when it has none): only the limits it runs under, where a point's process fails.
  const rlim_t fewest = 8;
#else
  const rlim_t fewest = 4;
#endif
  for (rlim_t files = fewest; files <= 8; ++files) {
    const Process p = run_limited({"sweep", scenario, "--db", dir.path("s.sqlite"), "-j", "2"},
                                  {{RLIMIT_NOFILE, files, files}});
    // The dynamic loader needs descriptors too (an address-sanitized binary's runtime
    // library more of them): a process that never started says nothing of hgsim.
    if (p.status == 127 && p.err.find("error while loading shared libraries") != std::string::npos)
      continue;
    ++ran;
    EXPECT_EQ(p.status, 1) << files << ": " << p.err;
    EXPECT_NE(p.err.find("ulimit -n"), std::string::npos) << files << ": " << p.err;
    EXPECT_EQ(p.err.find("internal error"), std::string::npos) << files << ": " << p.err;
    // No point could run: the database the sweep created is not left behind empty.
    for (const char* suffix : {"", "-wal", "-shm"})
      EXPECT_FALSE(fs::exists(dir.path("s.sqlite") + suffix)) << files << ": " << suffix;
  }
  EXPECT_GE(ran, fewest < 8 ? 3 : 1);  // 6, 7 and 8 at least, or 8
}

// Past the file-size limit a write fails (SIGXFSZ is ignored): the message names the limit,
// and the temporary file is removed.
TEST(HostileEnvironment, AFileSizeLimitIsNamedAndNothingStays) {
  TempDir dir;
  const std::string scenario = dir.write("scenario.yaml", kBase);
  const std::string out = dir.path("out");
  fs::create_directories(out);
  const Process p =
      run_limited({"run", scenario, "--trace", out + "/t.json"}, {{RLIMIT_FSIZE, 1024, 1024}});
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_NE(p.err.find("the file-size limit, ulimit -f, is 1 KiB"), std::string::npos) << p.err;
  EXPECT_EQ(p.err.find("bug in hgsim"), std::string::npos) << p.err;
  EXPECT_TRUE(fs::is_empty(out)) << "a temporary file stayed";
}

// A stack smaller than the 8 MiB hgsim's limits are measured on: raised when the hard limit
// allows, else refused at once with the limit named (it crashed a large scenario with
// SIGSEGV).
TEST(HostileEnvironment, ASmallStackIsRaisedOrNamed) {
  TempDir dir;
  const std::string scenario = dir.write("scenario.yaml", kBase);
#if defined(__SANITIZE_ADDRESS__)
  // An address-sanitized process may need more than 64 KiB of stack before main runs.
  GTEST_SKIP() << "a 64 KiB stack may be too small for the sanitizer runtime itself";
#endif
  Process p = run_limited({"check", scenario}, {{RLIMIT_STACK, 64 << 10, 64 << 10}});
  EXPECT_EQ(p.status, 1) << p.err;
  EXPECT_EQ(p.err,
            "hgsim: the stack limit (ulimit -s) is 64 KiB; hgsim needs 8192 KiB (the Linux "
            "default): raise it, e.g. ulimit -s 8192\n");
  p = run_limited({"check", scenario}, {{RLIMIT_STACK, 64 << 10, RLIM_INFINITY}});
  EXPECT_EQ(p.status, 0) << p.err;
}

// A database that refuses writes while a sweep resumes (here a trigger; a full disk or a
// read-only file alike) is the user's: exit 1 naming it and the point, and the points
// written before stay readable.
TEST(HostileDatabase, ADatabaseThatRefusesAWriteIsNamedWithThePoint) {
  TempDir dir;
  const std::string scenario =
      dir.write("s.yaml", kBase + "sweep:\n  wan[*].bandwidth: [1Gbps, 2Gbps, 10Gbps]\n");
  const std::string db = dir.path("s.sqlite");
  ASSERT_EQ(cli({"sweep", scenario, "--db", db, "-j", "1"}).status, 0);
  {
    sqlite3* h = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(h,
                           "DELETE FROM points WHERE point = 1; CREATE TRIGGER refuse BEFORE "
                           "INSERT ON points BEGIN SELECT RAISE(ABORT, 'no more rows'); END;",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(h);
  }
  CliResult r = cli({"sweep", scenario, "--db", db, "-j", "1", "--resume"});
  EXPECT_EQ(r.status, apps::kBadInput) << r.err;
  EXPECT_NE(r.err.find("sweep database '" + db + "': cannot write point 1: no more rows"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the points written before it stay in"), std::string::npos) << r.err;
  r = cli({"results", db, "--csv"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lines_of(r.out), 3u) << r.out;  // the header, points 0 and 2
}

// One rule for rows (apps::row_refusal): `results` refuses a database at a row hgsim could
// not have written, in every format alike, and --resume runs such a point again (or drops a
// row numbered outside the grid), saying so, after which the database reads.
TEST(HostileDatabase, DamagedRowsAreRefusedAlikeAndResumeRepairsThem) {
  TempDir dir;
  const std::string scenario =
      dir.write("s.yaml", kBase + "sweep:\n  wan[*].bandwidth: [1Gbps, 2Gbps, 10Gbps]\n");
  const std::string db = dir.path("s.sqlite");
  ASSERT_EQ(cli({"sweep", scenario, "--db", db, "-j", "1"}).status, 0);
  const std::pair<const char*, const char*> damages[] = {
      {"UPDATE points SET mfu = 9e999 WHERE point = 0", "point 0: mfu holds 'Inf'"},
      {"INSERT INTO points SELECT -1, settings, status, error, iteration_time_s, tokens_per_s, "
       "mfu, plan, result, finished_at, wall_s, scenario_hash, choice FROM points WHERE point = 2",
       "point -1: a point numbered below 0"},
      {"UPDATE points SET settings = 'null' WHERE point = 1",
       "point 1: settings: expected an object"},
      {"UPDATE points SET status = 'maybe' WHERE point = 2",
       "point 2: status 'maybe': expected 'ok' or 'failed'"},
  };
  for (const auto& [sql, says] : damages) {
    {
      sqlite3* h = nullptr;
      ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
      // A hand-made schema without the CHECK on status, as an edited file may have.
      ASSERT_EQ(sqlite3_exec(h,
                             "PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = "
                             "replace(sql, 'CHECK (status IN (''ok'', ''failed''))', '') "
                             "WHERE name = 'points'; PRAGMA writable_schema = OFF;",
                             nullptr, nullptr, nullptr),
                SQLITE_OK);
      sqlite3_close(h);
      ASSERT_EQ(sqlite3_open(db.c_str(), &h), SQLITE_OK);
      char* message = nullptr;
      ASSERT_EQ(sqlite3_exec(h, sql, nullptr, nullptr, &message), SQLITE_OK)
          << (message ? message : "") << ": " << sql;
      sqlite3_close(h);
    }
    for (const char* format : {"", "--csv", "--json"}) {
      std::vector<std::string> words{"results", db};
      if (*format) words.push_back(format);
      const CliResult r = cli(words);
      EXPECT_EQ(r.status, apps::kBadInput) << says << " " << format << ": " << r.err;
      EXPECT_NE(r.err.find(says), std::string::npos) << format << ": " << r.err;
      EXPECT_NE(r.err.find("--resume runs the point again"), std::string::npos) << r.err;
    }
    const CliResult resumed = cli({"sweep", scenario, "--db", db, "-j", "1", "--resume"});
    EXPECT_EQ(resumed.status, 0) << resumed.err;
    EXPECT_NE(resumed.err.find(says), std::string::npos) << resumed.err;
    const CliResult read = cli({"results", db, "--csv"});
    EXPECT_EQ(read.status, 0) << says << ": " << read.err;
    EXPECT_EQ(lines_of(read.out), 4u) << read.out;  // the header and the 3 points
  }
}

}  // namespace
