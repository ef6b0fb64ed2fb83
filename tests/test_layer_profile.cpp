// Layer profiles (what the live profiler measures) and the compute model that plays them
// back: exact lookup, linear interpolation and proportional extrapolation in sequences,
// the optimizer line, recomputation, errors that name the file and the JSON path, and
// `hgsim run --layer-profile` end to end.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "apps/commands.hpp"
#include "kernels/layer_profile.hpp"
#include "models/transformer.hpp"

using namespace hgsim;
using namespace hgsim::kernels;
using Json = nlohmann::ordered_json;

namespace {

core::ModelConfig small_model() {
  core::ModelConfig m;
  m.name = "small";
  m.layers = 4;
  m.hidden = 128;
  m.heads = 4;
  m.kv_heads = 4;
  m.vocab = 1000;
  m.ffn_hidden = 512;
  return m;
}

Json layer(double sequences, int seq_len, int tp, double forward, double backward,
           double recompute = 0) {
  return {{"what", "layer"},        {"sequences", sequences},
          {"seq_len", seq_len},     {"tp", tp},
          {"hidden", 128},          {"forward_s", forward},
          {"backward_s", backward}, {"recompute_s", recompute}};
}

Json document(Json entries) {
  return {{"format", "hgsim-layer-profile/1"},
          {"device", {{"kind", "cpu"}, {"name", "test cpu"}, {"threads", 1}}},
          {"created", "2026-11-29T00:00:00Z"},
          {"entries", entries}};
}

Json standard_entries() {
  return Json::array({layer(2, 64, 1, 0.010, 0.020),
                      layer(4, 64, 1, 0.018, 0.034),
                      layer(4, 64, 2, 0.011, 0.019, 0.004),
                      {{"what", "logits"},
                       {"sequences", 4},
                       {"seq_len", 64},
                       {"tp", 1},
                       {"forward_s", 0.005},
                       {"backward_s", 0.007}},
                      {{"what", "optimizer"}, {"parameters", 1000}, {"seconds", 0.002}},
                      {{"what", "optimizer"}, {"parameters", 3000}, {"seconds", 0.004}},
                      {{"what", "embedding"}, {"anything", "ignored"}}});
}

LayerProfileModel model_of(const Json& entries) {
  return LayerProfileModel(parse_layer_profile(document(entries).dump(), "test.json"));
}

LayerWork work(const core::ModelConfig& m, double sequences, int seq_len, int tp,
               core::Recompute recompute = core::Recompute::none) {
  LayerWork w;
  w.model = &m;
  w.sequences = sequences;
  w.seq_len = seq_len;
  w.tp = tp;
  w.recompute = recompute;
  return w;
}

// The message of the LayerProfileError that `body` throws ("" when it throws none).
template <class F>
std::string error_of(F body) {
  try {
    body();
  } catch (const LayerProfileError& e) {
    return e.what();
  }
  return "";
}

std::string parse_error(const Json& doc) {
  return error_of([&] { parse_layer_profile(doc.dump(), "bad.json"); });
}

const GpuSpec& any_gpu() {
  return *find_gpu("H100-80GB-SXM");
}

}  // namespace

TEST(LayerProfile, ExactEntriesAreReturnedAsMeasured) {
  const auto m = small_model();
  const auto model = model_of(standard_entries());
  const PhaseTimes t = model.layer(any_gpu(), work(m, 4, 64, 1));
  EXPECT_DOUBLE_EQ(t.forward.value(), 0.018);
  EXPECT_DOUBLE_EQ(t.backward.value(), 0.034);
  EXPECT_DOUBLE_EQ(t.recompute.value(), 0);
  const PhaseTimes l = model.logits(any_gpu(), work(m, 4, 64, 1));
  EXPECT_DOUBLE_EQ(l.forward.value(), 0.005);
  EXPECT_DOUBLE_EQ(l.backward.value(), 0.007);
  // The live runner's CPU plays every device, and the provenance says so.
  EXPECT_EQ(model.provenance(any_gpu()), "measured:test.json (cpu 'test cpu' plays every device)");
}

TEST(LayerProfile, AGpuLayerProfileAppliesToItsGpuTypeOnly) {
  const auto m = small_model();
  Json doc = document(standard_entries());
  doc["device"] = {
      {"kind", "cuda"}, {"name", "NVIDIA H100 80GB HBM3"}, {"catalog_gpu", "H100-80GB-SXM"}};
  const LayerProfileModel model(parse_layer_profile(doc.dump(), "h100-layers.json"));
  const GpuSpec& h100 = *find_gpu("H100-80GB-SXM");
  const GpuSpec& a100 = *find_gpu("A100-80GB-SXM");
  EXPECT_DOUBLE_EQ(model.layer(h100, work(m, 4, 64, 1)).forward.value(), 0.018);
  EXPECT_EQ(model.provenance(h100), "measured:h100-layers.json");
  // The A100 keeps its own model: the H100's layer times are not applied to it.
  const KernelModel estimate;
  EXPECT_EQ(model.layer(a100, work(m, 4, 64, 1)).forward,
            estimate.layer(a100, work(m, 4, 64, 1)).forward);
  EXPECT_EQ(model.logits(a100, work(m, 4, 64, 1)).forward,
            estimate.logits(a100, work(m, 4, 64, 1)).forward);
  EXPECT_EQ(model.optimizer_step(a100, 1e6, core::Precision::bf16, core::Optimizer::adam),
            estimate.optimizer_step(a100, 1e6, core::Precision::bf16, core::Optimizer::adam));
  EXPECT_EQ(model.provenance(a100), "estimated");
  // A CUDA device's profile must say which GPU type it measured.
  doc["device"] = {{"kind", "cuda"}, {"name", "some card"}};
  const std::string e = parse_error(doc);
  EXPECT_EQ(e.rfind("bad.json: device.catalog_gpu: a layer profile of a CUDA device names its "
                    "GPU type",
                    0),
            0u)
      << e;
  doc["device"] = {{"kind", "cuda"}, {"name", "x"}, {"catalog_gpu", "H100-80GB-SMX"}};
  EXPECT_NE(parse_error(doc).find("did you mean 'H100-80GB-SXM'"), std::string::npos)
      << parse_error(doc);
  // Two profiles of one GPU type: only the first would answer.
  auto h100_profile = parse_layer_profile(document(standard_entries()).dump(), "a.json");
  h100_profile.catalog_gpu = "H100-80GB-SXM";
  EXPECT_NE(error_of([&] {
              LayerProfileModel({h100_profile, h100_profile}, nullptr);
            }).find("both measure H100-80GB-SXM"),
            std::string::npos);
}

TEST(LayerProfile, InterpolatesLinearlyInSequencesBetweenEntries) {
  const auto m = small_model();
  const auto model = model_of(standard_entries());
  const PhaseTimes t = model.layer(any_gpu(), work(m, 3, 64, 1));
  EXPECT_NEAR(t.forward.value(), 0.014, 1e-15);
  EXPECT_NEAR(t.backward.value(), 0.027, 1e-15);
  const PhaseTimes q = model.layer(any_gpu(), work(m, 2.5, 64, 1));
  EXPECT_NEAR(q.forward.value(), 0.010 + 0.25 * 0.008, 1e-15);
}

TEST(LayerProfile, ExtrapolatesProportionallyBeyondTheEntries) {
  const auto m = small_model();
  const auto model = model_of(standard_entries());
  const PhaseTimes above = model.layer(any_gpu(), work(m, 10, 64, 1));
  EXPECT_NEAR(above.forward.value(), 0.018 * 10 / 4, 1e-15);
  EXPECT_NEAR(above.backward.value(), 0.034 * 10 / 4, 1e-15);
  const PhaseTimes below = model.layer(any_gpu(), work(m, 1, 64, 1));
  EXPECT_NEAR(below.forward.value(), 0.010 / 2, 1e-15);
  // One entry for tp 2: proportional on both sides of it.
  const PhaseTimes tp2 = model.layer(any_gpu(), work(m, 1, 64, 2));
  EXPECT_NEAR(tp2.forward.value(), 0.011 / 4, 1e-15);
  const PhaseTimes logits = model.logits(any_gpu(), work(m, 0.5, 64, 1));
  EXPECT_NEAR(logits.forward.value(), 0.005 / 8, 1e-15);
}

TEST(LayerProfile, RecomputeComesFromTheEntryOrTheForward) {
  const auto m = small_model();
  const auto model = model_of(standard_entries());
  // tp 2 measured recompute_s: it is used for either kind of recomputation.
  EXPECT_DOUBLE_EQ(
      model.layer(any_gpu(), work(m, 4, 64, 2, core::Recompute::full)).recompute.value(), 0.004);
  EXPECT_DOUBLE_EQ(model.layer(any_gpu(), work(m, 4, 64, 2)).recompute.value(), 0);
  // tp 1 did not measure it: a full recompute repeats the forward, a selective one the
  // attention share of it.
  EXPECT_DOUBLE_EQ(
      model.layer(any_gpu(), work(m, 4, 64, 1, core::Recompute::full)).recompute.value(), 0.018);
  const double share = models::attention_share_of_layer(m, 64);
  ASSERT_GT(share, 0);
  ASSERT_LT(share, 1);
  EXPECT_NEAR(
      model.layer(any_gpu(), work(m, 4, 64, 1, core::Recompute::selective)).recompute.value(),
      share * 0.018, 1e-15);
}

TEST(LayerProfile, OptimizerIsLinearInParametersThroughTheEntries) {
  const auto model = model_of(standard_entries());
  auto step = [&](double p) {
    return model.optimizer_step(any_gpu(), p, core::Precision::bf16, core::Optimizer::adam).value();
  };
  EXPECT_DOUBLE_EQ(step(1000), 0.002);
  EXPECT_DOUBLE_EQ(step(3000), 0.004);
  EXPECT_NEAR(step(2000), 0.003, 1e-15);
  EXPECT_NEAR(step(6000), 0.008, 1e-15);  // proportional beyond the largest
  EXPECT_NEAR(step(500), 0.001, 1e-15);   // and below the smallest
  const auto one = model_of(Json::array(
      {layer(1, 64, 1, 1, 1), {{"what", "optimizer"}, {"parameters", 100}, {"seconds", 0.5}}}));
  EXPECT_NEAR(
      one.optimizer_step(any_gpu(), 250, core::Precision::bf16, core::Optimizer::sgd).value(), 1.25,
      1e-15);
}

TEST(LayerProfile, MissingConfigurationsNameWhatIsMissing) {
  const auto m = small_model();
  const auto model = model_of(standard_entries());
  const std::string seq = error_of([&] { model.layer(any_gpu(), work(m, 4, 128, 1)); });
  EXPECT_NE(seq.find("test.json"), std::string::npos) << seq;
  EXPECT_NE(seq.find("no \"layer\" entry for seq_len 128, tp 1, hidden 128"), std::string::npos)
      << seq;
  EXPECT_NE(seq.find("seq_len 64, tp 2"), std::string::npos) << seq;  // what the file has
  const std::string logits = error_of([&] { model.logits(any_gpu(), work(m, 4, 64, 2)); });
  EXPECT_NE(logits.find("no \"logits\" entry for seq_len 64, tp 2"), std::string::npos) << logits;
  // An entry measured on another model (hidden 256) does not answer for this one.
  auto other = small_model();
  other.hidden = 256;
  EXPECT_NE(error_of([&] { model.layer(any_gpu(), work(other, 4, 64, 1)); }), "");
  const auto no_optimizer = model_of(Json::array({layer(1, 64, 1, 1, 1)}));
  EXPECT_NE(error_of([&] {
              no_optimizer.optimizer_step(any_gpu(), 1, core::Precision::bf16,
                                          core::Optimizer::adam);
            }).find("no \"optimizer\" entry"),
            std::string::npos);
}

TEST(LayerProfile, BadFilesAreErrorsWithFileAndJsonPath) {
  Json missing = document(standard_entries());
  missing["entries"][1].erase("forward_s");
  EXPECT_EQ(parse_error(missing), "bad.json: entries[1]: missing key 'forward_s'");

  Json format = document(standard_entries());
  format["format"] = "hgsim-profile/1";
  EXPECT_NE(parse_error(format).find("bad.json: format: expected \"hgsim-layer-profile/1\""),
            std::string::npos);

  Json negative = document(standard_entries());
  negative["entries"][2]["backward_s"] = -0.5;
  EXPECT_EQ(parse_error(negative),
            "bad.json: entries[2].backward_s: expected a positive number, got -0.5");

  Json negative_optimizer = document(standard_entries());
  negative_optimizer["entries"][4]["seconds"] = -1;
  EXPECT_EQ(parse_error(negative_optimizer),
            "bad.json: entries[4].seconds: expected a positive number, got -1");

  Json fractional_tp = document(standard_entries());
  fractional_tp["entries"][0]["tp"] = 1.5;
  EXPECT_EQ(parse_error(fractional_tp),
            "bad.json: entries[0].tp: expected a whole number, got 1.5");

  Json what = document(standard_entries());
  what["entries"][0]["what"] = "layers";
  EXPECT_NE(parse_error(what).find("bad.json: entries[0].what: expected \"layer\""),
            std::string::npos);

  Json duplicate = document(standard_entries());
  duplicate["entries"].push_back(layer(2, 64, 1, 0.5, 0.5));
  EXPECT_NE(parse_error(duplicate).find("bad.json: entries[7]: a second \"layer\" entry"),
            std::string::npos);

  Json optimizer_forever = document(standard_entries());
  optimizer_forever["entries"][4]["seconds"] = 1e308;
  EXPECT_EQ(parse_error(optimizer_forever),
            "bad.json: entries[4].seconds: a measured time of at most 3600 s, got 1e+308");

  Json escape = document(standard_entries());
  escape["entries"][0]["what"] = "lay\x1b[31mer";
  EXPECT_EQ(parse_error(escape),
            "bad.json: entries[0].what: a control character in \"lay\\u001b[31mer\"");

  // The duplicate check holds for entries far apart in a long file.
  Json many = document(standard_entries());
  for (int s = 100; s < 20100; ++s) many["entries"].push_back(layer(s, 64, 1, 0.5, 0.5));
  many["entries"].push_back(layer(5000, 64, 1, 0.5, 0.5));
  EXPECT_NE(parse_error(many).find("bad.json: entries[20007]: a second \"layer\" entry"),
            std::string::npos);

  Json no_device = document(standard_entries());
  no_device.erase("device");
  EXPECT_EQ(parse_error(no_device), "bad.json: missing key 'device'");

  EXPECT_NE(error_of([] {
              parse_layer_profile("{\"format\": ", "cut.json");
            }).find("cut.json: not valid JSON"),
            std::string::npos);
  const std::string unreadable = error_of([] { read_layer_profile("/nonexistent/layers.json"); });
  EXPECT_EQ(unreadable.rfind("/nonexistent/layers.json: ", 0), 0u) << unreadable;
  EXPECT_NE(unreadable.find("No such file or directory"), std::string::npos) << unreadable;
}

// End to end: every device's compute comes from the file (doubling every time doubles
// every device's compute), the results say so, and a missing configuration is an error.
TEST(LayerProfile, HgsimRunPlaysTheLayerProfile) {
  const auto dir = std::filesystem::temp_directory_path() / "hgsim_test_layer_profile";
  std::filesystem::create_directories(dir);
  // inline-model.yaml: micro-batch 2, dp 1, seq_len 2048, tp 2, hidden 2560.
  auto write = [&](const std::string& name, double scale, int tp) {
    auto entry = [&](const char* what, double f, double b) {
      return Json{{"what", what},   {"sequences", 2},         {"seq_len", 2048},        {"tp", tp},
                  {"hidden", 2560}, {"forward_s", f * scale}, {"backward_s", b * scale}};
    };
    Json entries =
        Json::array({entry("layer", 0.004, 0.008),
                     entry("logits", 0.002, 0.003),
                     {{"what", "optimizer"}, {"parameters", 1e8}, {"seconds", 0.01 * scale}}});
    std::ofstream(dir / name) << document(entries).dump(1);
    return (dir / name).string();
  };
  const std::string once = write("once.json", 1, 2), twice = write("twice.json", 2, 2),
                    wrong_tp = write("tp4.json", 1, 4);
  // The example with its gradient buckets reduced after the backward: overlapped buckets
  // slow the compute that runs beside them (kernels::CollectiveStream) by an amount that
  // depends on how long that compute is, so only without the overlap does doubling every
  // time double every device's compute exactly.
  const std::string scenario = (dir / "inline-model-after-backward.yaml").string();
  {
    std::ifstream in(std::string(HGSIM_SOURCE_DIR) + "/scenarios/examples/inline-model.yaml");
    std::stringstream text;
    text << in.rdbuf();
    std::string yaml = text.str();
    const std::string key = "strategy:\n";
    const auto at = yaml.find(key);
    ASSERT_NE(at, std::string::npos);
    yaml.insert(at + key.size(), "  grad_reduce: after_backward\n");
    std::ofstream(scenario) << yaml;
  }
  auto run = [&](const std::string& profile, std::string* err_text = nullptr) {
    const char* argv[] = {"hgsim",           "run",          scenario.c_str(), "--json",
                          "--layer-profile", profile.c_str()};
    std::ostringstream out, err;
    const int status = apps::run_cli(6, argv, out, err);
    if (err_text) *err_text = out.str() + err.str();  // with --json, problems go to out
    return std::make_pair(status, status == 0 ? Json::parse(out.str()) : Json());
  };
  const auto [status1, r1] = run(once);
  ASSERT_EQ(status1, 0);
  const auto [status2, r2] = run(twice);
  ASSERT_EQ(status2, 0);
  ASSERT_EQ(r1["devices"].size(), r2["devices"].size());
  for (std::size_t d = 0; d < r1["devices"].size(); ++d)
    EXPECT_NEAR(r2["devices"][d]["compute_s"].get<double>(),
                2 * r1["devices"][d]["compute_s"].get<double>(),
                1e-9 * r2["devices"][d]["compute_s"].get<double>());
  EXPECT_NE(r1["provenance"].dump().find("measured:once.json"), std::string::npos)
      << r1["provenance"].dump();
  std::string err;
  const auto [status3, r3] = run(wrong_tp, &err);
  EXPECT_EQ(status3, 1);
  EXPECT_NE(err.find("entry for seq_len 2048, tp 2, hidden 2560"), std::string::npos) << err;
  std::filesystem::remove_all(dir);
}
