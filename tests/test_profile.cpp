// Profiles and the compute-time model built on them: JSON round trip, errors that name the
// file and the JSON path, interpolation (exact at measured points, monotone between), the
// profiles applying to their own GPU type only, provenance, the op list against models/' FLOPs, and
// the `hgsim profile` command line.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "apps/commands.hpp"
#include "kernels/cuda_devices.hpp"
#include "kernels/profile.hpp"
#include "kernels/profiler.hpp"
#include "models/transformer.hpp"
#include "models/zoo.hpp"

using namespace hgsim;
using namespace hgsim::kernels;
using core::Precision;

namespace {

const GpuSpec& gpu(const char* name) {
  const GpuSpec* g = find_gpu(name);
  if (!g) throw std::runtime_error(std::string("not in the catalog: ") + name);
  return *g;
}

ProfileEntry entry(const std::string& op, std::vector<double> shape, double seconds,
                   const std::string& dtype = "bf16") {
  const OpCall c = make_op(op, shape, dtype == "fp32" ? 4 : 2);
  return {op, dtype, shape, seconds, seconds * 0.95, seconds * 1.05, c.flops, c.bytes, 7};
}

// A synthetic GPU profile: every op of a llama2-7b layer at 1, 2 and 4 sequences of 2048,
// tp 1, with times from a simple roofline (so that the numbers are plausible).
Profile synthetic_profile(const std::string& catalog_gpu, const std::string& file) {
  Profile p;
  p.file = file;
  p.created = "2026-11-29T00:00:00Z";
  p.attention = "synthetic";
  p.device.kind = "cuda";
  p.device.name = "synthetic " + catalog_gpu;
  p.device.catalog_gpu = catalog_gpu;
  p.device.peak_flops_per_s["bf16"] = 800e12;
  p.device.copy_bandwidth_bytes_per_s = 4e12;
  const core::ModelConfig& m = models::find_model("llama2-7b")->config;
  for (double b : {1.0, 2.0, 4.0}) {
    const LayerShape shape{&m, b, 2048, 1, false, Precision::bf16};
    for (const PhaseOps& ops : {layer_ops(shape), logits_ops(shape)})
      for (const auto* list : {&ops.forward, &ops.backward})
        for (const OpCall& c : *list) {
          bool seen = false;
          for (const auto& e : p.entries) seen |= e.op == c.op && e.shape == c.shape;
          if (!seen)
            p.entries.push_back(entry(c.op, c.shape, c.flops / 600e12 + c.bytes / 3e12 + 5e-6));
        }
  }
  p.entries.push_back(entry("adam", {1e8}, 1e8 * 28 / 3e12, "fp32"));
  return p;
}

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("hgsim-test-" + std::to_string(::getpid()) + "-" + name);
}

std::string expect_profile_error(const std::string& json) {
  try {
    parse_profile(json, "bad.json");
  } catch (const ProfileError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for " << json;
  return "";
}

}  // namespace

TEST(Profile, JsonRoundTrip) {
  const Profile p = synthetic_profile("H100-80GB-SXM", "x.json");
  const auto file = temp_file("roundtrip.json");
  write_profile(p, file);
  const Profile back = read_profile(file);
  std::filesystem::remove(file);
  EXPECT_EQ(back.device.name, p.device.name);
  EXPECT_EQ(back.device.catalog_gpu, p.device.catalog_gpu);
  EXPECT_EQ(back.device.peak_flops_per_s, p.device.peak_flops_per_s);
  ASSERT_EQ(back.entries.size(), p.entries.size());
  for (std::size_t i = 0; i < p.entries.size(); ++i) {
    EXPECT_EQ(back.entries[i].op, p.entries[i].op);
    EXPECT_EQ(back.entries[i].shape, p.entries[i].shape);
    EXPECT_DOUBLE_EQ(back.entries[i].median_s, p.entries[i].median_s);
    EXPECT_DOUBLE_EQ(back.entries[i].flops, p.entries[i].flops);
  }
  EXPECT_EQ(profile_to_json(back), profile_to_json(p));
}

TEST(Profile, BadJsonNamesFileAndPath) {
  Profile p = synthetic_profile("H100-80GB-SXM", "x.json");
  p.entries.resize(4);
  const std::string good = profile_to_json(p);
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const auto at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  EXPECT_NE(expect_profile_error("{").find("bad.json: not valid JSON"), std::string::npos);
  EXPECT_NE(expect_profile_error("[]").find("bad.json: expected a JSON object"), std::string::npos);
  std::string e = expect_profile_error(replaced("\"median_s\": ", "\"median_s\": -"));
  EXPECT_NE(e.find("bad.json: entries[0].median_s: expected a positive number"), std::string::npos)
      << e;
  e = expect_profile_error(replaced("\"op\": \"rmsnorm\"", "\"op\": \"rmsnrom\""));
  EXPECT_NE(e.find("entries[0].op: unknown op \"rmsnrom\""), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'rmsnorm'"), std::string::npos) << e;
  e = expect_profile_error(replaced("\"dtype\": \"bf16\"", "\"dtype\": \"bf17\""));
  EXPECT_NE(e.find("entries[0].dtype"), std::string::npos) << e;
  e = expect_profile_error(replaced("\"kind\": \"cuda\"", "\"kind\": \"tpu\""));
  EXPECT_NE(e.find("device.kind: expected \"cpu\" or \"cuda\""), std::string::npos) << e;
  e = expect_profile_error(replaced("\"copy_bandwidth_bytes_per_s\"", "\"copy_bw\""));
  EXPECT_NE(e.find("device: missing key 'copy_bandwidth_bytes_per_s'"), std::string::npos) << e;
  e = expect_profile_error(replaced("\"format\": \"hgsim-profile/1\"", "\"format\": \"v0\""));
  EXPECT_NE(e.find("format: expected \"hgsim-profile/1\""), std::string::npos) << e;
  // Values that would price ops at infinity, or be used for nothing, or reach a terminal.
  e = expect_profile_error(replaced("\"median_s\": ", "\"median_s\": 1e999, \"x\": "));
  EXPECT_NE(e.find("bad.json: not valid JSON"), std::string::npos) << e;
  e = expect_profile_error(replaced("\"median_s\": ", "\"median_s\": 1e308, \"x\": "));
  EXPECT_NE(e.find("entries[0].median_s: a measured time of at most 3600 s"), std::string::npos)
      << e;
  {
    Profile no_work = p;
    no_work.entries[1].flops = 0;
    no_work.entries[1].bytes = 0;
    e = expect_profile_error(profile_to_json(no_work));
    EXPECT_NE(e.find("entries[1]: an op of no FLOPs and no bytes"), std::string::npos) << e;
    Profile empty = p;
    empty.entries.clear();
    e = expect_profile_error(profile_to_json(empty));
    EXPECT_NE(e.find("entries: no entries"), std::string::npos) << e;
    Profile typo = p;
    typo.device.catalog_gpu = "H100-80GB-SMX";
    e = expect_profile_error(profile_to_json(typo));
    EXPECT_NE(e.find("device.catalog_gpu: unknown GPU \"H100-80GB-SMX\"; did you mean "
                     "'H100-80GB-SXM'?"),
              std::string::npos)
        << e;
  }
  e = expect_profile_error(replaced("\"kind\": \"cuda\"", "\"kind\": \"cu\\u001bda\""));
  EXPECT_NE(e.find("device.kind: a control character in \"cu\\u001bda\""), std::string::npos) << e;
  EXPECT_EQ(e.find('\x1b'), std::string::npos);
  e = expect_profile_error(
      replaced("\"kind\": \"cuda\"", "\"kind\": \"" + std::string(100000, 'k') + "\""));
  EXPECT_LT(e.size(), 300u);

  // The factory reports it as a diagnostic with the file, and falls back to the roofline.
  const auto file = temp_file("bad.json");
  std::ofstream(file) << replaced("\"median_s\": ", "\"median_s\": -");
  core::Diagnostics diags;
  auto model = compute_model_for({file.string()}, diags);
  std::filesystem::remove(file);
  ASSERT_TRUE(diags.has_errors());
  // Named once: the message starts with the file ("FILE: error: FILE: ..." said it twice).
  EXPECT_EQ(diags.all()[0].message.rfind(file.string() + ": entries[0].median_s", 0), 0u)
      << diags.format();
  EXPECT_EQ(diags.format().find(file.string() + ": error: "), std::string::npos) << diags.format();
  EXPECT_EQ(model->provenance(gpu("H100-80GB-SXM")), "estimated");
}

TEST(Profile, InterpolationExactAtMeasuredPointsAndMonotoneBetween) {
  Profile p;
  p.device.name = "test";
  for (double m : {256.0, 1024.0, 4096.0, 16384.0})
    p.entries.push_back(
        entry("gemm", {m, 4096, 4096}, 2 * m * 4096 * 4096 / (200e12 * (1 - 256 / (m + 512)))));
  const ProfileDatabase db(p);
  for (const ProfileEntry& e : p.entries)
    EXPECT_DOUBLE_EQ(*db.time(make_op("gemm", e.shape, 2), "bf16"), e.median_s);
  double last = 0;
  for (double m = 256; m <= 16384; m *= 1.07) {
    const double t = *db.time(make_op("gemm", {m, 4096, 4096}, 2), "bf16");
    EXPECT_GT(t, last) << "m " << m;
    last = t;
  }
  // Beyond the measured range the throughput of the nearest point is kept.
  const double big = *db.time(make_op("gemm", {65536, 4096, 4096}, 2), "bf16");
  EXPECT_NEAR(big, 4 * p.entries.back().median_s, 1e-12);
  // Other shapes fall back to the curve of all entries, by FLOPs.
  const double other = *db.time(make_op("gemm", {1024, 8192, 2048}, 2), "bf16");
  EXPECT_DOUBLE_EQ(other, p.entries[1].median_s);  // same FLOPs as {1024, 4096, 4096}
  EXPECT_FALSE(db.time(make_op("gemm", {1, 1, 1}, 4), "fp32"));
}

TEST(Profile, AProfileAppliesToTheGpuTypeItMeasuredOnly) {
  const ProfileModel model({synthetic_profile("H100-80GB-SXM", "/some/dir/h100.json")});
  const GpuSpec& h100 = gpu("H100-80GB-SXM");
  const GpuSpec& a100 = gpu("A100-80GB-SXM");
  const core::ModelConfig& m = models::find_model("llama2-7b")->config;
  LayerWork work;
  work.model = &m;
  work.sequences = 2;
  work.seq_len = 2048;
  const PhaseTimes t = model.layer(h100, work);
  EXPECT_EQ(model.provenance(h100), "measured:h100.json");
  EXPECT_EQ(model.source_for(a100).database, nullptr);
  // The A100 is not derived from the H100's profile: it is the kernel-level model's, exactly.
  const KernelModel estimate;
  EXPECT_EQ(model.layer(a100, work).forward, estimate.layer(a100, work).forward);
  EXPECT_EQ(model.layer(a100, work).backward, estimate.layer(a100, work).backward);
  EXPECT_EQ(model.logits(a100, work).forward, estimate.logits(a100, work).forward);
  EXPECT_EQ(model.optimizer_step(a100, 1e8, Precision::bf16, core::Optimizer::adam),
            estimate.optimizer_step(a100, 1e8, Precision::bf16, core::Optimizer::adam));
  EXPECT_EQ(model.provenance(a100), "estimated");
  // The layer is the sum of its ops.
  const PhaseOps ops = layer_ops(LayerShape{&m, 2, 2048, 1, false, Precision::bf16});
  EXPECT_DOUBLE_EQ(t.forward.value(), model.ops_time(h100, ops.forward, Precision::bf16).value());
  EXPECT_DOUBLE_EQ(t.backward.value(), model.ops_time(h100, ops.backward, Precision::bf16).value());
  EXPECT_GT(t.backward.value(), 1.5 * t.forward.value());
  EXPECT_GT(model.optimizer_step(h100, 1e8, Precision::bf16, core::Optimizer::adam).value(), 0);
}

TEST(Profile, APartialProfileIsPartlyMeasuredAndMovesNoOtherGpu) {
  // An H100 profile of one GEMM shape: the case (it raised the A100's compute by
  // 11.5 % and called the H100 "measured").
  Profile one_gemm = synthetic_profile("H100-80GB-SXM", "h100.json");
  const core::ModelConfig& m = models::find_model("llama3-8b")->config;
  const PhaseOps ops = layer_ops(LayerShape{&m, 1, 8192, 1, false, Precision::bf16});
  const OpCall& first_gemm = ops.forward[1];
  ASSERT_EQ(first_gemm.op, "gemm");
  one_gemm.entries = {entry("gemm", first_gemm.shape, first_gemm.flops / 700e12)};
  const ProfileModel model({one_gemm});
  const GpuSpec& h100 = gpu("H100-80GB-SXM");
  const GpuSpec& a100 = gpu("A100-80GB-SXM");
  LayerWork work;
  work.model = &m;
  work.sequences = 1;
  work.seq_len = 8192;
  const KernelModel estimate;
  EXPECT_EQ(model.layer(a100, work).forward, estimate.layer(a100, work).forward);
  EXPECT_EQ(model.provenance(a100), "estimated");
  // On the H100: the measured GEMM, every other op estimated on the H100's own figures.
  model.layer(h100, work);
  double expected = 0;
  std::set<std::string> names;
  for (const OpCall& c : ops.forward) {
    names.insert(c.op);
    expected += c.op == "gemm" ? *ProfileDatabase(one_gemm).time(c, "bf16")
                               : estimate.op_time(h100, c, Precision::bf16).value();
  }
  EXPECT_NEAR(model.ops_time(h100, ops.forward, Precision::bf16).value(), expected,
              1e-12 * expected);
  for (const OpCall& c : ops.backward) names.insert(c.op);
  const std::string p = model.provenance(h100);
  EXPECT_EQ(p.rfind("partly measured:h100.json: 1 of " + std::to_string(names.size()) + " ops", 0),
            0u)
      << p;
  EXPECT_NE(p.find("estimated: "), std::string::npos) << p;
  EXPECT_EQ(p.find("estimated: gemm,"), std::string::npos) << p;
}

TEST(Profile, WithoutGpuProfilesTheRooflineAnswers) {
  core::Diagnostics diags;
  auto none = compute_model_for({}, diags);
  EXPECT_FALSE(diags.has_errors());
  EXPECT_EQ(none->provenance(gpu("H100-80GB-SXM")), "estimated");
  // A CPU profile does not transfer to GPUs: the roofline answers for them.
  Profile cpu = synthetic_profile("H100-80GB-SXM", "cpu.json");
  cpu.device.kind = "cpu";
  cpu.device.catalog_gpu.clear();
  const ProfileModel model({cpu});
  const core::ModelConfig& m = models::find_model("gpt2-124m")->config;
  LayerWork work;
  work.model = &m;
  work.seq_len = 1024;
  const KernelModel roofline;
  EXPECT_EQ(model.layer(gpu("A100-80GB-SXM"), work).forward,
            roofline.layer(gpu("A100-80GB-SXM"), work).forward);
  EXPECT_EQ(model.provenance(gpu("A100-80GB-SXM")), "estimated");
  EXPECT_EQ(model.provenance(device_as_gpu(cpu.device)), "measured:cpu.json");
}

TEST(Profile, LayerOpsCarryTheModelsFlops) {
  for (const char* name : {"gpt2-124m", "llama2-7b", "llama3-70b", "gpt3-175b"}) {
    const core::ModelConfig& m = models::find_model(name)->config;
    for (int tp : {1, 2, 8}) {
      if (m.kv_heads % tp) continue;
      const LayerShape shape{&m, 3, 1024, tp, false, Precision::bf16};
      const PhaseOps ops = layer_ops(shape);
      double forward = 0, backward = 0;
      for (const OpCall& c : ops.forward) forward += c.bound == Bound::compute ? c.flops : 0;
      for (const OpCall& c : ops.backward) backward += c.bound == Bound::compute ? c.flops : 0;
      EXPECT_NEAR(forward, models::layer_forward_flops(m, 3, 1024).value() / tp, 1e-9 * forward)
          << name << " tp " << tp;
      EXPECT_NEAR(backward, models::layer_backward_flops(m, 3, 1024).value() / tp, 1e-9 * backward)
          << name << " tp " << tp;
      const PhaseOps head = logits_ops(shape);
      double logits = 0;
      for (const OpCall& c : head.forward) logits += c.bound == Bound::compute ? c.flops : 0;
      EXPECT_NEAR(logits, models::logits_forward_flops(m, 3, 1024).value() / tp, 1e-9 * logits);
    }
  }
}

TEST(Profile, CpuSweepIsDeduplicatedAndCoversEveryOpOfItsLayers) {
  CpuSweep sweep;
  sweep.models = {"gpt2-124m", "gpt3-125m", "llama2-7b"};
  const auto calls = sweep_ops(sweep);
  std::set<std::pair<std::string, std::vector<double>>> unique;
  for (const OpCall& c : calls) EXPECT_TRUE(unique.insert({c.op, c.shape}).second) << c.op;
  std::set<std::string> ops;
  for (const OpCall& c : calls) ops.insert(c.op);
  for (const char* op :
       {"gemm", "gemm_dgrad", "gemm_wgrad", "attention", "attention_backward", "layernorm",
        "rmsnorm_backward", "gelu", "swiglu_backward", "add", "rope", "cross_entropy", "adam"})
    EXPECT_TRUE(ops.count(op)) << op;
  // gpt2-124m and gpt3-125m have the same layer shape: the sweep times it once.
  const core::ModelConfig a = scale_for_cpu(models::find_model("gpt2-124m")->config);
  const core::ModelConfig b = scale_for_cpu(models::find_model("gpt3-125m")->config);
  EXPECT_EQ(a.heads, b.heads);
  EXPECT_EQ(a.hidden / a.heads, 64);
}

TEST(Profile, ShippedProfilesAreValid) {
  for (const std::string& file : shipped_profiles()) {
    const Profile p = read_profile(file);
    EXPECT_FALSE(p.entries.empty()) << file;
    EXPECT_GT(p.device.copy_bandwidth_bytes_per_s, 0) << file;
  }
}

TEST(ProfileCommand, CudaWithoutDeviceSaysWhy) {
  std::ostringstream out, err;
  const char* argv[] = {"hgsim", "profile", "--device", "cuda", "--out", "x.json"};
  const int rc = apps::run_cli(6, argv, out, err);
  if (!local_cuda_devices().empty()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_EQ(rc, apps::kBadInput);
  EXPECT_NE(err.str().find("no CUDA device"), std::string::npos) << err.str();
}

TEST(ProfileCommand, ChecksLayersOfATinySweep) {
  const auto file = temp_file("tiny.json");
  std::ostringstream out, err;
  const std::string path = file.string();
  const char* argv[] = {"hgsim",
                        "profile",
                        "--device",
                        "cpu",
                        "--models",
                        "gpt2-124m",
                        "--micro-batches",
                        "1",
                        "--tp",
                        "2",
                        "--seq-len",
                        "32",
                        "--seconds-per-entry",
                        "0.001",
                        "--out",
                        path.c_str()};
  ASSERT_EQ(apps::run_cli(16, argv, out, err), apps::kSuccess) << err.str();
  const Profile p = read_profile(file);
  EXPECT_EQ(p.device.kind, "cpu");
  EXPECT_TRUE(p.device.conditions.count("load_average"));
  std::ostringstream out2, err2;
  const char* check[] = {"hgsim",
                         "profile",
                         "--device",
                         "cpu",
                         "--check-layers",
                         "--json",
                         "--models",
                         "gpt2-124m",
                         "--micro-batches",
                         "1",
                         "--tp",
                         "2",
                         "--seq-len",
                         "32",
                         "--seconds-per-entry",
                         "0.001",
                         "--profile",
                         path.c_str()};
  ASSERT_EQ(apps::run_cli(18, check, out2, err2), apps::kSuccess) << err2.str();
  std::filesystem::remove(file);
  const auto j = nlohmann::json::parse(out2.str());
  ASSERT_EQ(j["layers"].size(), 2u);
  for (const auto& row : j["layers"]) {
    EXPECT_GT(row["predicted_s"].get<double>(), 0);
    EXPECT_GT(row["measured_s"].get<double>(), 0);
  }
}

TEST(Profile, RecomputeAndSequenceParallel) {
  const ProfileModel model({synthetic_profile("H100-80GB-SXM", "h100.json")});
  const GpuSpec& h100 = gpu("H100-80GB-SXM");
  const core::ModelConfig& m = models::find_model("llama2-7b")->config;
  LayerWork work;
  work.model = &m;
  work.sequences = 2;
  work.seq_len = 2048;
  work.tp = 2;
  const PhaseTimes none = model.layer(h100, work);
  EXPECT_EQ(none.recompute.value(), 0);
  work.recompute = core::Recompute::full;
  EXPECT_DOUBLE_EQ(model.layer(h100, work).recompute.value(), none.forward.value());
  work.recompute = core::Recompute::selective;
  const LayerShape shape{&m, 2, 2048, 2, false, Precision::bf16};
  std::vector<OpCall> attention;
  for (const OpCall& c : layer_ops(shape).forward)
    if (c.op == "attention") attention.push_back(c);
  EXPECT_DOUBLE_EQ(model.layer(h100, work).recompute.value(),
                   model.ops_time(h100, attention, Precision::bf16).value());
  // Sequence parallelism splits the norms and residual adds over tp: less time, same FLOPs.
  work.recompute = core::Recompute::none;
  work.sequence_parallel = true;
  EXPECT_LT(model.layer(h100, work).forward.value(), none.forward.value());
  const LayerShape sp{&m, 2, 2048, 2, true, Precision::bf16};
  for (const OpCall& c : layer_ops(sp).forward)
    if (c.op == "rmsnorm") {
      EXPECT_EQ(c.shape[0], 2 * 2048 / 2);
    }
}
