// Profiles checked against the hardware they claim to measure: a time that beats the GPU's
// datasheet peak (kernels/gpus.yaml through math_rate, what the compute model prices with)
// is refused with the file, entry, shape and rates; one whose best GEMM is implausibly slow
// is a warning; two profiles of one device are refused; a profile no GPU of the scenario
// uses is a warning; layer profiles get the same peak check; `profile --check-layers` refuses
// a profile of another device.
#include <filesystem>
#include <sstream>

#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "apps/commands.hpp"
#include "kernels/layer_profile.hpp"
#include "kernels/profile.hpp"
#include "models/transformer.hpp"
#include "models/zoo.hpp"

using namespace hgsim;
using namespace hgsim::kernels;

namespace {

const char* kH100 = "H100-80GB-SXM";

double bf16_peak(const char* gpu) {
  return math_rate(*find_gpu(gpu), core::Precision::bf16)->rate.value();
}

std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() /
         ("hgsim-test-checks-" + std::to_string(::getpid()) + "-" + name);
}

// A profile of `gpu` holding one bf16 GEMM of 8192^3 at `fraction` of the GPU's datasheet
// bf16 peak, written to a file of its own.
std::string gemm_profile(const std::string& name, const char* gpu, double fraction) {
  Profile p;
  p.created = "2026-11-29T00:00:00Z";
  p.attention = "none";
  p.device.kind = "cuda";
  p.device.name = std::string("test ") + gpu;
  p.device.catalog_gpu = gpu;
  p.device.peak_flops_per_s["bf16"] = bf16_peak(gpu);
  p.device.copy_bandwidth_bytes_per_s = 3e12;
  const OpCall c = make_op("gemm", {8192, 8192, 8192}, 2);
  const double t = c.flops / (fraction * bf16_peak(gpu));
  p.entries.push_back({"gemm", "bf16", {8192, 8192, 8192}, t, t, t, c.flops, c.bytes, 5});
  const auto file = temp_file(name);
  write_profile(p, file);
  return file.string();
}

struct Checked {
  core::Diagnostics diags;
  std::unique_ptr<ComputeModel> model;
};

Checked model_of(const std::vector<std::string>& files) {
  Checked c;
  c.model = compute_model_for(files, c.diags);
  for (const auto& f : files) std::filesystem::remove(f);
  return c;
}

}  // namespace

TEST(ProfileChecks, ATimeBeyondTheDatasheetPeakIsRefusedNamingFileOpShapeAndRates) {
  // Twice the peak: what microseconds written as seconds (or a mislabelled device) give.
  const auto file = gemm_profile("fast.json", kH100, 2.0);
  const auto c = model_of({file});
  ASSERT_TRUE(c.diags.has_errors());
  const std::string m = c.diags.all()[0].message;
  EXPECT_EQ(m.rfind(file + ": entries[0] (gemm bf16 [8192, 8192, 8192])", 0), 0u) << m;
  std::ostringstream implied, peak;
  implied.precision(4);
  implied << 2 * bf16_peak(kH100) / 1e12 << " TFLOP/s";
  peak.precision(4);
  peak << bf16_peak(kH100) / 1e12 << " TFLOP/s";
  EXPECT_NE(m.find("implies " + implied.str()), std::string::npos) << m;
  EXPECT_NE(m.find("H100-80GB-SXM's datasheet peak for bf16 (" + peak.str() + ")"),
            std::string::npos)
      << m;
  // The model falls back to the estimate: nothing is priced from the refused file.
  EXPECT_EQ(c.model->provenance(*find_gpu(kH100)), "estimated");
}

TEST(ProfileChecks, WithinTheTenPercentMarginOverThePeakIsAccepted) {
  // A GPU clocked above the boost clock its datasheet peak assumes: 5 % over, accepted.
  const auto c = model_of({gemm_profile("boost.json", kH100, 1.05)});
  EXPECT_FALSE(c.diags.has_errors()) << c.diags.format();
  EXPECT_TRUE(c.diags.empty()) << c.diags.format();
  EXPECT_EQ(c.model->provenance(*find_gpu(kH100)).rfind("measured:", 0), 0u);
  const auto over = model_of({gemm_profile("over.json", kH100, 1.11)});
  EXPECT_TRUE(over.diags.has_errors());
}

TEST(ProfileChecks, AProfileWhoseBestGemmIsUnderOnePercentOfPeakIsAWarning) {
  // Milliseconds written as seconds: 1000x too slow, 0.075 % of the peak.
  const auto file = gemm_profile("slow.json", kH100, 0.75 / 1000);
  const auto c = model_of({file});
  EXPECT_FALSE(c.diags.has_errors()) << c.diags.format();
  ASSERT_EQ(c.diags.all().size(), 1u) << c.diags.format();
  const std::string m = c.diags.all()[0].message;
  EXPECT_EQ(m.rfind(file + ": the profile's fastest GEMM reaches 0.075 % of the H100", 0), 0u) << m;
  // Still used as written (a slow device is possible): it says so, it does not change it.
  EXPECT_EQ(c.model->provenance(*find_gpu(kH100)).rfind("measured:", 0), 0u);
  const auto fine = model_of({gemm_profile("fine.json", kH100, 0.75)});
  EXPECT_TRUE(fine.diags.empty()) << fine.diags.format();
}

TEST(ProfileChecks, TwoProfilesOfOneGpuAreRefusedNamingBoth) {
  const auto first = gemm_profile("first.json", kH100, 0.7);
  const auto second = gemm_profile("second.json", kH100, 0.5);
  const auto c = model_of({first, second});
  ASSERT_TRUE(c.diags.has_errors());
  const std::string m = c.diags.all()[0].message;
  EXPECT_NE(m.find(second + " and " + first + " both measure H100-80GB-SXM"), std::string::npos)
      << m;
  // Profiles of two different GPUs are fine.
  const auto both = model_of(
      {gemm_profile("h100.json", kH100, 0.7), gemm_profile("a100.json", "A100-80GB-SXM", 0.7)});
  EXPECT_FALSE(both.diags.has_errors()) << both.diags.format();
}

TEST(ProfileChecks, AProfileNoneOfTheScenariosGpusUsesIsAWarning) {
  const auto shipped = shipped_profiles();  // the build machine's CPU profile
  ASSERT_FALSE(shipped.empty());
  core::Diagnostics diags;
  const auto cpu = compute_model_for(shipped, diags);
  ASSERT_FALSE(diags.has_errors()) << diags.format();
  warn_unused_profiles(*cpu, {kH100, "A100-80GB-SXM"}, diags);
  ASSERT_EQ(diags.all().size(), shipped.size()) << diags.format();
  const std::string m = diags.all()[0].message;
  EXPECT_EQ(m.rfind(shipped[0] + " measured cpu '", 0), 0u) << m;
  EXPECT_NE(m.find("none of the scenario's GPUs (H100-80GB-SXM, A100-80GB-SXM)"), std::string::npos)
      << m;
  // A GPU profile answers for its own GPU type only: an H100 profile on an A100 scenario is
  // not used, and said; on an H100 scenario it is.
  core::Diagnostics gpu_diags;
  const auto file = gemm_profile("own.json", kH100, 0.7);
  const auto gpu = compute_model_for({file}, gpu_diags);
  std::filesystem::remove(file);
  warn_unused_profiles(*gpu, {kH100}, gpu_diags);
  EXPECT_TRUE(gpu_diags.empty()) << gpu_diags.format();
  warn_unused_profiles(*gpu, {"A100-80GB-SXM"}, gpu_diags);
  ASSERT_EQ(gpu_diags.all().size(), 1u) << gpu_diags.format();
  EXPECT_NE(gpu_diags.all()[0].message.find("none of the scenario's GPUs (A100-80GB-SXM)"),
            std::string::npos)
      << gpu_diags.format();
}

TEST(ProfileChecks, ALayerProfileFasterThanThePeakIsRefused) {
  const core::ModelConfig& m = models::find_model("llama2-7b")->config;
  const double flops = models::layer_forward_flops(m, 1, 2048).value();
  LayerProfile p;
  p.file = "live.json";
  p.device_kind = "cpu";
  p.device_name = "test";
  LayerEntry e;
  e.sequences = 1;
  e.seq_len = 2048;
  e.tp = 2;
  // Per GPU: half the layer's FLOPs (tp 2), here at three times the H100's bf16 peak.
  e.forward_s = flops / 2 / (3 * bf16_peak(kH100));
  e.backward_s = 2 * flops / 2 / (0.5 * bf16_peak(kH100));
  p.layers.push_back(e);
  const LayerProfileModel model(p);
  LayerWork w;
  w.model = &m;
  w.sequences = 1;
  w.seq_len = 2048;
  w.tp = 2;
  w.precision = core::Precision::bf16;
  try {
    model.layer(*find_gpu(kH100), w);
    ADD_FAILURE() << "a layer three times faster than the peak was accepted";
  } catch (const LayerProfileError& err) {
    const std::string msg = err.what();
    EXPECT_EQ(msg.rfind("live.json: the layer forward time for seq_len 2048, tp 2", 0), 0u) << msg;
    std::ostringstream implied;
    implied.precision(4);
    implied << 3 * bf16_peak(kH100) / 1e12 << " TFLOP/s";
    EXPECT_NE(msg.find("implies " + implied.str()), std::string::npos) << msg;
  }
  // At half the peak it plays back as measured.
  p.layers[0].forward_s = flops / 2 / (0.5 * bf16_peak(kH100));
  const LayerProfileModel fine(p);
  EXPECT_DOUBLE_EQ(fine.layer(*find_gpu(kH100), w).forward.value(), p.layers[0].forward_s);
}

TEST(ProfileChecks, CheckLayersRefusesAProfileOfAnotherDevice) {
  const auto file = gemm_profile("cuda.json", kH100, 0.7);
  std::ostringstream out, err;
  const char* argv[] = {"hgsim",    "profile",   "--device",  "cpu",       "--check-layers",
                        "--models", "gpt2-124m", "--profile", file.c_str()};
  EXPECT_EQ(apps::run_cli(9, argv, out, err), apps::kBadInput);
  std::filesystem::remove(file);
  EXPECT_NE(err.str().find("measured cuda device 'test H100-80GB-SXM' (catalog GPU "
                           "H100-80GB-SXM), but --check-layers runs the layers on this "
                           "machine's CPU"),
            std::string::npos)
      << err.str();
}
