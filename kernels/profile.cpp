#include "kernels/profile.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/files.hpp"
#include "kernels/gpu_catalog.hpp"
#include "kernels/json_reader.hpp"

namespace hgsim::kernels {

using Json = nlohmann::ordered_json;

namespace {

constexpr const char* kFormat = "hgsim-profile/1";

// The dtypes a profile may measure.
const std::vector<std::string>& dtypes() {
  static const std::vector<std::string> names{"fp32", "tf32", "fp16", "bf16", "fp8"};
  return names;
}

// Reads a profile, throwing ProfileError with the file and the JSON path of the problem.
class Reader : public JsonReader<ProfileError> {
 public:
  using JsonReader::JsonReader;

  Profile read(const Json& j) const {
    if (!j.is_object()) fail("", "expected a JSON object at the top level");
    if (string(j, "", "format") != kFormat)
      fail("format", std::string("expected \"") + kFormat + "\"");
    Profile p;
    p.file = file();
    p.created = string(j, "", "created");
    p.attention = j.contains("attention") && j["attention"].is_string()
                      ? j["attention"].get<std::string>()
                      : "";
    p.device = device(member(j, "", "device"));
    const Json& entries = member(j, "", "entries");
    if (!entries.is_array()) fail("entries", "expected an array");
    if (entries.empty())
      fail("entries",
           "no entries: a profile of no op would be reported as measured and "
           "price nothing");
    for (std::size_t i = 0; i < entries.size(); ++i)
      p.entries.push_back(entry(entries[i], "entries[" + std::to_string(i) + "]"));
    return p;
  }

 private:
  ProfileDevice device(const Json& d) const {
    const std::string path = "device";
    if (!d.is_object()) fail(path, "expected an object");
    ProfileDevice dev;
    dev.kind = string(d, path, "kind");
    if (dev.kind != "cpu" && dev.kind != "cuda")
      fail(path + ".kind", "expected \"cpu\" or \"cuda\", got " + quote(d["kind"]));
    dev.name = string(d, path, "name");
    if (d.contains("catalog_gpu") && !d["catalog_gpu"].is_null()) {
      dev.catalog_gpu = string(d, path, "catalog_gpu");
      // A profile of an unknown GPU would be used for nothing, silently.
      if (!find_gpu(dev.catalog_gpu))
        fail(path + ".catalog_gpu", "unknown GPU " + quote(d["catalog_gpu"]) + "; " +
                                        core::did_you_mean(dev.catalog_gpu, gpu_names()));
    }
    if (d.contains("driver")) dev.driver = string(d, path, "driver");
    if (d.contains("toolkit")) dev.toolkit = string(d, path, "toolkit");
    if (d.contains("clocks") && d["clocks"].is_object())
      for (const auto& [k, v] : d["clocks"].items())
        if (v.is_number()) dev.clocks[k] = v.get<double>();
    const Json& peaks = member(d, path, "peak_flops_per_s");
    if (!peaks.is_object()) fail(path + ".peak_flops_per_s", "expected an object {dtype: FLOP/s}");
    for (const auto& [k, v] : peaks.items()) {
      if (std::find(dtypes().begin(), dtypes().end(), k) == dtypes().end())
        fail(path + ".peak_flops_per_s",
             "unknown dtype '" + core::excerpt(k) + "'; expected fp32, tf32, fp16, bf16, fp8");
      dev.peak_flops_per_s[k] = number(peaks, path + ".peak_flops_per_s", k.c_str(), true);
    }
    dev.copy_bandwidth_bytes_per_s = number(d, path, "copy_bandwidth_bytes_per_s", true);
    if (d.contains("conditions") && d["conditions"].is_object())
      for (const auto& [k, v] : d["conditions"].items())
        dev.conditions[k] = v.is_string() ? v.get<std::string>() : v.dump();
    return dev;
  }

  ProfileEntry entry(const Json& e, const std::string& path) const {
    if (!e.is_object()) fail(path, "expected an object");
    ProfileEntry out;
    out.op = string(e, path, "op");
    if (std::find(op_names().begin(), op_names().end(), out.op) == op_names().end())
      fail(path + ".op",
           "unknown op " + quote(e["op"]) + "; " + core::did_you_mean(out.op, op_names()));
    out.dtype = string(e, path, "dtype");
    if (std::find(dtypes().begin(), dtypes().end(), out.dtype) == dtypes().end())
      fail(path + ".dtype",
           "unknown dtype " + quote(e["dtype"]) + "; expected one of fp32, tf32, fp16, bf16, fp8");
    const Json& shape = member(e, path, "shape");
    if (!shape.is_array() || shape.empty()) fail(path + ".shape", "expected a non-empty array");
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (!shape[i].is_number() || shape[i].get<double>() <= 0)
        fail(path + ".shape[" + std::to_string(i) + "]",
             "expected a positive number, got " + quote(shape[i]));
      out.shape.push_back(shape[i].get<double>());
    }
    try {
      make_op(out.op, out.shape, 4);
    } catch (const std::invalid_argument& err) {
      fail(path + ".shape", err.what());
    }
    out.median_s = seconds(e, path, "median_s");
    out.p10_s = seconds(e, path, "p10_s");
    out.p90_s = seconds(e, path, "p90_s");
    if (!(out.p10_s <= out.median_s && out.median_s <= out.p90_s))
      fail(path, "expected p10_s <= median_s <= p90_s");
    out.flops = number(e, path, "flops", false);
    out.bytes = number(e, path, "bytes", false);
    if (out.flops == 0 && out.bytes == 0)
      fail(path, "an op of no FLOPs and no bytes: its time cannot be scaled to other shapes");
    if (e.contains("repeats")) out.repeats = int(number(e, path, "repeats", true));
    return out;
  }
};

double log_interpolate(double x, double x0, double y0, double x1, double y1) {
  if (x1 == x0) return y0;
  const double f = (std::log(x) - std::log(x0)) / (std::log(x1) - std::log(x0));
  return std::exp(std::log(y0) + f * (std::log(y1) - std::log(y0)));
}

}  // namespace

Profile parse_profile(const std::string& json_text, const std::string& file) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {  // a syntax error, a number past a double's range
    throw ProfileError(file + ": not valid JSON: " + e.what());
  }
  return Reader(file).read(j);
}

Profile read_profile(const std::filesystem::path& file) {
  core::Diagnostics diags;  // a regular file of bounded size only (no FIFO, no /dev/zero)
  const auto text = core::read_input_file(file.string(), "profile", diags);
  if (!text) throw ProfileError(file.string() + ": " + diags.all().front().message);
  return parse_profile(*text, file.string());
}

std::string profile_to_json(const Profile& p) {
  Json device{
      {"kind", p.device.kind},
      {"name", p.device.name},
      {"catalog_gpu", p.device.catalog_gpu.empty() ? Json(nullptr) : Json(p.device.catalog_gpu)},
      {"driver", p.device.driver},
      {"toolkit", p.device.toolkit},
      {"clocks", p.device.clocks},
      {"peak_flops_per_s", p.device.peak_flops_per_s},
      {"copy_bandwidth_bytes_per_s", p.device.copy_bandwidth_bytes_per_s},
      {"conditions", p.device.conditions}};
  Json entries = Json::array();
  for (const ProfileEntry& e : p.entries) {
    Json row{
        {"op", e.op},          {"dtype", e.dtype}, {"shape", e.shape}, {"median_s", e.median_s},
        {"p10_s", e.p10_s},    {"p90_s", e.p90_s}, {"flops", e.flops}, {"bytes", e.bytes},
        {"repeats", e.repeats}};
    // Achieved rates and their fraction of the measured peaks (informational).
    if (e.flops > 0) row["tflops"] = e.flops / e.median_s / 1e12;
    if (e.bytes > 0) row["gb_per_s"] = e.bytes / e.median_s / 1e9;
    const auto peak = p.device.peak_flops_per_s.find(e.dtype);
    if (peak != p.device.peak_flops_per_s.end() && e.flops > 0)
      row["fraction_of_peak_flops"] = e.flops / e.median_s / peak->second;
    if (p.device.copy_bandwidth_bytes_per_s > 0 && e.bytes > 0)
      row["fraction_of_copy_bandwidth"] =
          e.bytes / e.median_s / p.device.copy_bandwidth_bytes_per_s;
    entries.push_back(row);
  }
  Json j{{"format", kFormat},
         {"device", device},
         {"created", p.created},
         {"attention", p.attention},
         {"entries", entries}};
  return j.dump(1) + "\n";
}

void write_profile(const Profile& profile, const std::filesystem::path& file) {
  if (auto e = core::write_file_atomically(file.string(), profile_to_json(profile)))
    throw ProfileError(*e);
}

std::string dtype_name(core::Precision precision) {
  return core::to_string(precision);
}

// ---- database ------------------------------------------------------------------------------

namespace {

// Sorts a curve by work and merges equal work into one point (the geometric mean of the
// times); points of no work are left out (nothing to scale by).
void finish_curve(std::vector<std::pair<double, double>>& curve) {
  std::erase_if(curve, [](const auto& p) { return !(p.first > 0); });
  std::sort(curve.begin(), curve.end());
  std::vector<std::pair<double, double>> points;
  for (std::size_t i = 0; i < curve.size();) {
    std::size_t j = i;
    double log_sum = 0;
    for (; j < curve.size() && curve[j].first == curve[i].first; ++j)
      log_sum += std::log(curve[j].second);
    points.emplace_back(curve[i].first, std::exp(log_sum / double(j - i)));
    i = j;
  }
  curve = std::move(points);
}

}  // namespace

ProfileDatabase::ProfileDatabase(Profile profile) : profile_(std::move(profile)) {
  for (const ProfileEntry& e : profile_.entries) {
    OpTable& t = by_op_[{e.op, e.dtype}];
    t.exact.emplace(e.shape, e.median_s);
    const std::vector<double> tail(e.shape.begin() + 1, e.shape.end());
    auto& curves = t.by_tail[tail];
    for (Bound b : {Bound::compute, Bound::memory}) {
      const double work = b == Bound::compute ? e.flops : e.bytes;
      curves[static_cast<int>(b)].emplace_back(work, e.median_s);
      t.all[static_cast<int>(b)].emplace_back(work, e.median_s);
    }
  }
  for (auto& [key, t] : by_op_) {
    for (auto& [tail, curves] : t.by_tail)
      for (auto& c : curves) finish_curve(c);
    for (auto& c : t.all) finish_curve(c);
  }
}

bool ProfileDatabase::has(const std::string& op, const std::string& dtype) const {
  return by_op_.count({op, dtype}) > 0;
}

std::optional<double> ProfileDatabase::time(const OpCall& call, const std::string& dtype) const {
  const auto found = by_op_.find({call.op, dtype});
  if (found == by_op_.end()) return std::nullopt;
  const OpTable& t = found->second;
  if (const auto exact = t.exact.find(call.shape); exact != t.exact.end()) return exact->second;
  // The curve: entries that differ only in the first dimension, else all of the op's.
  const int bound = static_cast<int>(call.bound);
  const Curve* curve = &t.all[bound];
  if (!call.shape.empty())
    if (const auto tail = t.by_tail.find({call.shape.begin() + 1, call.shape.end()});
        tail != t.by_tail.end() && !tail->second[bound].empty())
      curve = &tail->second[bound];
  const Curve& points = *curve;
  const double work = call.work();
  if (work <= 0) return 0.0;
  if (points.empty()) return std::nullopt;  // no entry of the op has work of this bound
  if (work <= points.front().first) return points.front().second * work / points.front().first;
  if (work >= points.back().first) return points.back().second * work / points.back().first;
  const auto upper = std::upper_bound(points.begin(), points.end(), std::make_pair(work, 0.0));
  const auto lower = upper - 1;
  return log_interpolate(work, lower->first, lower->second, upper->first, upper->second);
}

}  // namespace hgsim::kernels
