#include "apps/codecs_command.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <ostream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "apps/cli_checks.hpp"
#include "apps/commands.hpp"
#include "compress/codec.hpp"
#include "compress/codec_spec.hpp"
#include "core/limits.hpp"
#include "core/units.hpp"

namespace hgsim::apps {
namespace {

using compress::CodecKind;
using compress::CodecSpec;
using Clock = std::chrono::steady_clock;

// The codecs the command measures: each with the catalog's defaults, fp8 in both scalings,
// int8 also with stochastic rounding.
std::vector<CodecSpec> bench_specs() {
  auto spec = [](CodecKind kind) {
    CodecSpec s;
    s.kind = kind;
    return s;
  };
  std::vector<CodecSpec> specs{spec(CodecKind::none), spec(CodecKind::fp16), spec(CodecKind::bf16)};
  for (CodecKind k : {CodecKind::fp8_e4m3, CodecKind::fp8_e5m2}) {
    specs.push_back(spec(k));
    CodecSpec b = spec(k);
    b.scaling = compress::Scaling::per_block;
    b.block = 128;
    specs.push_back(b);
  }
  CodecSpec int8 = spec(CodecKind::int8);
  int8.block = 128;
  specs.push_back(int8);
  int8.stochastic_rounding = true;
  specs.push_back(int8);
  CodecSpec int4 = spec(CodecKind::int4);
  int4.block = 128;
  specs.push_back(int4);
  for (CodecKind k : {CodecKind::topk, CodecKind::randomk}) {
    CodecSpec s = spec(k);
    s.ratio = 0.01;
    specs.push_back(s);
  }
  CodecSpec powersgd = spec(CodecKind::powersgd);
  powersgd.rank = 4;
  specs.push_back(powersgd);
  return specs;
}

// The best of several runs (at least 3, and at least 0.3 s in all): the machine is shared,
// the minimum is the least disturbed.
template <class F>
double best_seconds(F run) {
  double best = 1e300, total = 0;
  for (int i = 0; i < 3 || (total < 0.3 && i < 50); ++i) {
    const auto t0 = Clock::now();
    run();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::min(best, s);
    total += s;
  }
  return best;
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

struct Row {
  CodecSpec spec;
  std::size_t bytes = 0;
  double ratio = 0, error = 0, encode_gbs = 0, decode_gbs = 0;
};

}  // namespace

CLI::App* add_codecs_command(CLI::App& app, CodecsOptions& options) {
  CLI::App* cmd = app.add_subcommand(
      "codecs", "Every codec on random data: size against fp32, error, and (--bench) speed");
  cmd->add_flag("--bench", options.bench,
                "also measure encode/decode throughput on one CPU thread, beside memcpy");
  cmd->add_flag("--json", options.json, "print as JSON");
  // At most the elements one encoded buffer may hold (HGSIM_MAX_CODEC_ELEMENTS, 2^28 by
  // default): the command holds three fp32 copies and the encoded buffer, ~16 bytes each.
  cmd->add_option("--size", options.size,
                  "elements of the random fp32 tensor (default 2^24, at most "
                  "HGSIM_MAX_CODEC_ELEMENTS, 2^28 unless set)")
      ->check(integer_in(1, core::limits().codec_elements));
  return cmd;
}

namespace {

// Three fp32 copies of the tensor and an encoded buffer of at most 4 bytes an element (and
// the codecs' scratch, well below that).
constexpr double kBytesPerElement = 16;

int measure_codecs(const CodecsOptions& options, std::ostream& out, std::ostream& err);

}  // namespace

int run_codecs_command(const CodecsOptions& options, std::ostream& out, std::ostream& err) {
  const std::int64_t n = options.size;
  if (n < 1 || n > core::limits().codec_elements) {
    err << "hgsim codecs: --size " << n << ": must be from 1 to " << core::limits().codec_elements
        << "; "
        << core::limit_hint("HGSIM_MAX_CODEC_ELEMENTS",
                            static_cast<double>(core::limits().codec_elements))
        << "\n";
    return kBadInput;
  }
  // The command may take what one simulation may (HGSIM_MAX_MEMORY_BYTES), checked before
  // anything is allocated.
  const core::Bytes needed(kBytesPerElement * static_cast<double>(n));
  const double memory_limit = core::limits().memory_bytes;
  if (needed.value() > memory_limit) {
    err << "hgsim codecs: --size " << n << ": needs about " << core::human_size(needed)
        << " of memory (16 bytes an element: three fp32 copies and the encoded buffer), more "
           "than "
        << core::human_size(core::Bytes(memory_limit)) << "; use a smaller --size, or "
        << core::limit_hint("HGSIM_MAX_MEMORY_BYTES", memory_limit) << "\n";
    return kBadInput;
  }
  try {
    return measure_codecs(options, out, err);
  } catch (const std::bad_alloc&) {
    err << "hgsim codecs: --size " << n << ": out of memory: this machine cannot hold "
        << core::human_size(needed) << " (16 bytes an element); use a smaller --size\n";
    return kBadInput;
  }
}

namespace {

int measure_codecs(const CodecsOptions& options, std::ostream& out, std::ostream& err) {
  const std::int64_t n = options.size;
  const std::uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n)), y(x.size()), copy(x.size());
  for (float& v : x) v = normal(rng);
  const double fp32_bytes = 4.0 * static_cast<double>(n);
  // PowerSGD needs a matrix: 1024 columns when the size allows it, else the vector (and
  // the fallback codec).
  const compress::Shape vector_shape{n};
  const compress::Shape matrix_shape =
      n % 1024 == 0 && n >= 2048 ? compress::Shape{n / 1024, 1024} : vector_shape;

  double memcpy_gbs = 0;
  if (options.bench) {
    std::memcpy(copy.data(), x.data(), x.size() * 4);  // touch the pages first
    memcpy_gbs =
        fp32_bytes / best_seconds([&] { std::memcpy(copy.data(), x.data(), x.size() * 4); }) / 1e9;
  }

  std::vector<Row> rows;
  for (const CodecSpec& spec : bench_specs()) {
    if (options.bench && !options.json) err << "  " << compress::describe(spec) << "...\n";
    const compress::Shape& shape = spec.kind == CodecKind::powersgd ? matrix_shape : vector_shape;
    Row row{spec};
    std::vector<std::byte> enc(compress::encoded_bytes(spec, shape, compress::DType::fp32));
    const std::span<const float> in(x);
    compress::encode(spec, shape, in, enc, seed);
    compress::decode(enc, std::span<float>(y));
    row.bytes = enc.size();
    row.ratio = static_cast<double>(enc.size()) / fp32_bytes;
    row.error = compress::relative_l2_error(x, y);
    if (options.bench) {
      row.encode_gbs =
          fp32_bytes / best_seconds([&] { compress::encode(spec, shape, in, enc, seed); }) / 1e9;
      row.decode_gbs =
          fp32_bytes / best_seconds([&] { compress::decode(enc, std::span<float>(y)); }) / 1e9;
    }
    rows.push_back(row);
  }

  if (options.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json j{{"codec", compress::to_string(r.spec.kind)},
                       {"description", compress::describe(r.spec)},
                       {"encoded_bytes", r.bytes},
                       {"ratio_vs_fp32", r.ratio},
                       {"rel_l2_error", r.error}};
      if (options.bench) {
        j["encode_gb_per_s"] = r.encode_gbs;
        j["decode_gb_per_s"] = r.decode_gbs;
        j["encode_vs_memcpy"] = r.encode_gbs / memcpy_gbs;
      }
      list.push_back(j);
    }
    nlohmann::json doc{{"size", n}, {"seed", seed}, {"codecs", list}};
    if (options.bench) doc["memcpy_gb_per_s"] = memcpy_gbs;
    out << doc.dump(2) << "\n";
    return kSuccess;
  }

  out << "Codecs on " << n << " random N(0,1) fp32 elements (seed " << seed << ")"
      << (options.bench ? "; one CPU thread, best of >= 3 runs" : "") << "\n";
  if (options.bench) out << "memcpy of the same buffer: " << fixed(memcpy_gbs, 2) << " GB/s\n";
  out << "\n";
  std::vector<std::vector<std::string>> table{{"codec", "bytes", "vs fp32", "rel L2 error"}};
  if (options.bench)
    for (const char* h : {"encode GB/s", "decode GB/s", "encode/memcpy"}) table[0].push_back(h);
  for (const Row& r : rows) {
    std::vector<std::string> line{compress::describe(r.spec), std::to_string(r.bytes),
                                  fixed(r.ratio, 4), fixed(r.error, 6)};
    if (options.bench) {
      line.push_back(fixed(r.encode_gbs, 2));
      line.push_back(fixed(r.decode_gbs, 2));
      line.push_back(fixed(100 * r.encode_gbs / memcpy_gbs, 0) + "%");
    }
    table.push_back(line);
  }
  std::vector<std::size_t> width(table[0].size(), 0);
  for (const auto& line : table)
    for (std::size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  for (const auto& line : table) {
    for (std::size_t i = 0; i < line.size(); ++i)
      out << (i == 0 ? std::left : std::right) << std::setw(int(width[i])) << line[i]
          << (i + 1 < line.size() ? "  " : "\n");
  }
  out << std::left << "\nvs fp32: encoded bytes (header included) / 4 bytes per element. "
      << "GB/s: fp32 input bytes per second.\n"
      << "top-k, random-k, PowerSGD: one step without error feedback; PowerSGD on a "
      << (matrix_shape.size() == 2 ? std::to_string(matrix_shape[0]) + " x 1024 matrix"
                                   : std::string("vector (falls back to none)"))
      << ". Random data has no low-rank structure: PowerSGD's error here is its worst case.\n";
  return kSuccess;
}

}  // namespace

}  // namespace hgsim::apps
