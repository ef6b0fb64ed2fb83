// CPU implementation of every codec. The loops are written so that GCC vectorises them at
// -O3 (no intrinsics): tensors are processed block by block, block maxima are integer max
// reductions over magnitude bits, rounding is the 1.5 * 2^23 trick. The element arithmetic
// is in codec_math.hpp, shared with the CUDA kernels.
#include "compress/codec.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numbers>
#include <numeric>
#include <unordered_set>

#include <Eigen/Dense>

#include "compress/codec_cuda_body.hpp"
#include "compress/codec_math.hpp"
#include "core/limits.hpp"

static_assert(std::endian::native == std::endian::little,
              "the encoded format is little-endian and written with memcpy");

namespace hgsim::compress {

namespace {

constexpr std::uint8_t kMagic[4] = {'H', 'G', 'C', 'D'};
constexpr std::uint8_t kVersion = 1;
constexpr std::uint64_t kMaxCount = std::uint64_t(1) << 40;
// Sparse codecs keep at least one element in 2^20 (ratio >= 1e-6 > 2^-20).
constexpr int kMinKeptShift = 20;
constexpr std::uint8_t kFlagPerBlock = 1;
constexpr std::uint8_t kFlagStochastic = 2;
constexpr int kDefaultBlock = 128;

// ---- little helpers ------------------------------------------------------------------------

template <class T>
void put(std::byte* at, T value) {
  std::memcpy(at, &value, sizeof(T));
}
template <class T>
T get(const std::byte* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) {
  return (a + b - 1) / b;
}

// Bytes per top-k index: the fewest that hold n - 1.
std::size_t index_width(std::uint64_t n) {
  std::size_t w = 1;
  while (w < 8 && n - 1 >= (std::uint64_t(1) << (8 * w))) ++w;
  return w;
}

std::uint64_t derive_seed(std::uint64_t spec_seed, std::uint64_t step) {
  return math::mix64(spec_seed ^ math::mix64(step));
}

const char* codec_name(CodecKind k) {
  static const char* const names[] = {"none", "fp16", "bf16", "fp8-e4m3", "fp8-e5m2",
                                      "int8", "int4", "topk", "randomk",  "powersgd"};
  return names[static_cast<int>(k)];
}

bool is_fp8(CodecKind k) {
  return k == CodecKind::fp8_e4m3 || k == CodecKind::fp8_e5m2;
}

// The loops that touch every element. GCC compiles each twice (AVX2 and the x86-64
// baseline) and picks one when the program starts, so the binary runs everywhere and uses
// AVX2 where it exists; the source stays plain C++ that the compiler vectorises.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(HGSIM_NO_CLONES)
#define HGSIM_HOT __attribute__((target_clones("avx2", "default")))
#else
#define HGSIM_HOT
#endif

// The largest finite |x| of a run, as bits (signed: the magnitudes are below 2^31, and
// signed max vectorises on every x86-64 level).
HGSIM_HOT std::uint32_t max_magnitude_bits(const float* x, std::size_t n) {
  std::int32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto a = static_cast<std::int32_t>(math::finite_magnitude_bits(x[i]));
    m = a > m ? a : m;
  }
  return static_cast<std::uint32_t>(m);
}

HGSIM_HOT void f32_to_f16_run(const float* x, std::size_t n, std::uint16_t* o) {
  for (std::size_t i = 0; i < n; ++i) o[i] = math::f32_to_f16(x[i]);
}
HGSIM_HOT void f32_to_bf16_run(const float* x, std::size_t n, std::uint16_t* o) {
  for (std::size_t i = 0; i < n; ++i) o[i] = math::f32_to_bf16(x[i]);
}
HGSIM_HOT void f16_to_f32_run(const std::uint16_t* h, std::size_t n, float* o) {
  for (std::size_t i = 0; i < n; ++i) o[i] = math::f16_to_f32(h[i]);
}
HGSIM_HOT void bf16_to_f32_run(const std::uint16_t* h, std::size_t n, float* o) {
  for (std::size_t i = 0; i < n; ++i) o[i] = math::bf16_to_f32(h[i]);
}
HGSIM_HOT void e4m3_to_f32_run(const std::uint8_t* c, std::size_t n, float scale, float* o) {
  for (std::size_t i = 0; i < n; ++i) o[i] = math::e4m3_to_f32(c[i]) * scale;
}
HGSIM_HOT void e5m2_to_f32_run(const std::uint8_t* c, std::size_t n, float scale, float* o) {
  for (std::size_t i = 0; i < n; ++i) o[i] = math::e5m2_to_f32(c[i]) * scale;
}
HGSIM_HOT void quantize_run(const float* x, std::size_t n, float amax, float inv, float qmax,
                            std::int8_t* q) {
  for (std::size_t i = 0; i < n; ++i)
    q[i] = static_cast<std::int8_t>(math::quantize(x[i], amax, inv, qmax, -1.0f));
}
// Elements first .. first + n - 1, within one 2^32 range of indices (one noise key).
HGSIM_HOT void quantize_stochastic_keyed(const float* x, std::uint32_t n, std::uint32_t first_low,
                                         std::uint32_t key, float amax, float inv, float qmax,
                                         std::int8_t* q) {
  for (std::uint32_t i = 0; i < n; ++i)
    q[i] = static_cast<std::int8_t>(
        math::quantize(x[i], amax, inv, qmax, math::uniform01_keyed(key, first_low + i)));
}
void quantize_stochastic_run(const float* x, std::size_t n, std::uint64_t first, float amax,
                             float inv, float qmax, std::uint64_t seed, std::int8_t* q) {
  while (n > 0) {  // split where the index's high half changes
    const std::uint64_t room = (std::uint64_t(1) << 32) - (first & 0xFFFFFFFFu);
    const auto len = static_cast<std::uint32_t>(std::min<std::uint64_t>({n, room, UINT32_MAX}));
    quantize_stochastic_keyed(x, len, static_cast<std::uint32_t>(first),
                              math::noise_key(seed, static_cast<std::uint32_t>(first >> 32)), amax,
                              inv, qmax, q);
    x += len, q += len, first += len, n -= len;
  }
}
HGSIM_HOT void dequantize_int8_run(const std::int8_t* q, std::size_t n, float scale, float* o) {
  for (std::size_t i = 0; i < n; ++i) o[i] = math::dequantize(q[i], scale, 127.0f);
}
// int4: the run starts at an even element; byte i holds elements 2i (low) and 2i+1 (high).
HGSIM_HOT void dequantize_int4_run(const std::uint8_t* packed, std::size_t n, float scale,
                                   float* o) {
  for (std::size_t i = 0; i < n / 2; ++i) {
    const int lo = packed[i] & 0xF, hi = packed[i] >> 4;
    o[2 * i] = math::dequantize(lo >= 8 ? lo - 16 : lo, scale, 7.0f);
    o[2 * i + 1] = math::dequantize(hi >= 8 ? hi - 16 : hi, scale, 7.0f);
  }
  if (n % 2) {
    const int lo = packed[n / 2] & 0xF;
    o[n - 1] = math::dequantize(lo >= 8 ? lo - 16 : lo, scale, 7.0f);
  }
}

// The tensor as fp32: the input itself, or a converted copy.
class F32 {
 public:
  explicit F32(ConstTensor t) {
    if (t.dtype == DType::fp32) {
      view_ = {static_cast<const float*>(t.data), t.count};
    } else {
      copy_.resize(t.count);
      convert(t, MutableTensor(std::span<float>(copy_)));
      view_ = copy_;
    }
  }
  std::span<const float> span() const { return view_; }

 private:
  std::vector<float> copy_;
  std::span<const float> view_;
};

// Writes fp32 values into `out` (any dtype) at `offset`.
void store(std::span<const float> values, MutableTensor out, std::size_t offset) {
  switch (out.dtype) {
    case DType::fp32:
      std::memcpy(static_cast<float*>(out.data) + offset, values.data(), values.size() * 4);
      return;
    case DType::fp16: {
      f32_to_f16_run(values.data(), values.size(), static_cast<std::uint16_t*>(out.data) + offset);
      return;
    }
    case DType::bf16: {
      f32_to_bf16_run(values.data(), values.size(), static_cast<std::uint16_t*>(out.data) + offset);
      return;
    }
  }
}

// One element of a possibly unaligned array (top-k values follow indices of 1 to 5 bytes).
float load_one(const void* data, DType dtype, std::size_t i) {
  const auto* bytes = static_cast<const std::byte*>(data);
  if (dtype == DType::fp32) return get<float>(bytes + 4 * i);
  const auto h = get<std::uint16_t>(bytes + 2 * i);
  return dtype == DType::fp16 ? math::f16_to_f32(h) : math::bf16_to_f32(h);
}

// ---- header --------------------------------------------------------------------------------

struct Header {
  CodecKind kind;
  DType dtype;
  std::uint8_t flags;
  std::uint64_t count;
  std::uint32_t a;  // block (int8, int4, fp8 per-block) or rank (PowerSGD)
  std::uint32_t b;  // columns (PowerSGD)
  std::uint64_t kept;
  std::uint64_t seed;
};

void write_header(std::byte* out, const Header& h) {
  std::memcpy(out, kMagic, 4);
  put<std::uint8_t>(out + 4, kVersion);
  put<std::uint8_t>(out + 5, static_cast<std::uint8_t>(h.kind));
  put<std::uint8_t>(out + 6, static_cast<std::uint8_t>(h.dtype));
  put<std::uint8_t>(out + 7, h.flags);
  put<std::uint64_t>(out + 8, h.count);
  put<std::uint32_t>(out + 16, h.a);
  put<std::uint32_t>(out + 20, h.b);
  put<std::uint64_t>(out + 24, h.kept);
  put<std::uint64_t>(out + 32, h.seed);
}

// Body size of an encoding; the arguments have been checked (count <= 2^40, block >= 1,
// kept <= count, rank <= min(rows, cols)), so nothing overflows.
std::uint64_t body_bytes(CodecKind kind, DType dtype, std::uint64_t n, std::uint64_t block,
                         bool per_block, std::uint64_t kept, std::uint64_t rows, std::uint64_t cols,
                         std::uint64_t rank) {
  const std::uint64_t es = element_size(dtype);
  switch (kind) {
    case CodecKind::none:
      return n * es;
    case CodecKind::fp16:
    case CodecKind::bf16:
      return 2 * n;
    case CodecKind::fp8_e4m3:
    case CodecKind::fp8_e5m2:
      return (per_block ? 4 * ceil_div(n, block) : 4) + n;
    case CodecKind::int8:
      return 4 * ceil_div(n, block) + n;
    case CodecKind::int4:
      return 4 * ceil_div(n, block) + ceil_div(n, 2);
    case CodecKind::topk:
      return kept * (index_width(n) + es);
    case CodecKind::randomk:
      return kept * es;
    case CodecKind::powersgd:
      return 4 * (rows + cols) * rank;
  }
  return 0;
}

[[noreturn]] void bad(const std::string& what) {
  throw CodecError("encoded buffer: " + what);
}

// ---- random-k indices ----------------------------------------------------------------------

// k distinct indices out of n, ascending, uniformly chosen (Floyd's algorithm), a function
// of (seed, n, k) only: the decoder draws the same ones.
std::vector<std::uint64_t> random_indices(std::uint64_t seed, std::uint64_t n, std::uint64_t k) {
  auto draw = [&](std::uint64_t j) {  // uniform in [0, j]
    const unsigned __int128 r = static_cast<unsigned __int128>(math::mix64(seed ^ math::mix64(j)));
    return static_cast<std::uint64_t>((r * (static_cast<unsigned __int128>(j) + 1)) >> 64);
  };
  std::vector<std::uint64_t> out;
  out.reserve(k);
  if (k * 16 >= n) {  // dense: a bitmap
    std::vector<bool> chosen(n, false);
    for (std::uint64_t j = n - k; j < n; ++j) {
      const std::uint64_t t = draw(j);
      chosen[chosen[t] ? j : t] = true;
    }
    for (std::uint64_t i = 0; i < n; ++i)
      if (chosen[i]) out.push_back(i);
    return out;
  }
  std::unordered_set<std::uint64_t> chosen;
  chosen.reserve(2 * k);
  for (std::uint64_t j = n - k; j < n; ++j) {
    const std::uint64_t t = draw(j);
    const std::uint64_t pick = chosen.count(t) ? j : t;
    chosen.insert(pick);
    out.push_back(pick);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---- top-k selection -----------------------------------------------------------------------

// The sort key (math::topk_key) and the choice of each digit (math::topk_radix_bucket) are
// shared with the CUDA kernels in codec_math.hpp.
using math::topk_key;

// The k largest magnitudes, ties to the lower index, ascending: a four-pass radix select
// of the k-th largest key, then one pass that collects. O(n), deterministic.
std::vector<std::uint64_t> topk_indices(std::span<const float> x, std::uint64_t k) {
  std::uint32_t prefix = 0, mask = 0;
  std::uint64_t remaining = k;  // how many of the keys matching the prefix are still wanted
  for (int shift = 24; shift >= 0; shift -= 8) {
    std::uint64_t hist[256] = {};
    for (float v : x) {
      const std::uint32_t key = topk_key(v);
      if ((key & mask) == prefix) ++hist[(key >> shift) & 0xFF];
    }
    const int bucket = math::topk_radix_bucket(hist, remaining);
    prefix |= static_cast<std::uint32_t>(bucket) << shift;
    mask |= 0xFFu << shift;
  }
  std::vector<std::uint64_t> out;
  out.reserve(k);
  for (std::uint64_t i = 0; i < x.size(); ++i) {
    const std::uint32_t key = topk_key(x[i]);
    if (key > prefix) {
      out.push_back(i);
    } else if (key == prefix && remaining > 0) {
      out.push_back(i);
      --remaining;
    }
  }
  return out;
}

// ---- body encoders -------------------------------------------------------------------------

void encode_half(CodecKind kind, std::span<const float> x, std::byte* body) {
  auto* o = reinterpret_cast<std::uint16_t*>(body);
  if (kind == CodecKind::fp16)
    f32_to_f16_run(x.data(), x.size(), o);
  else
    f32_to_bf16_run(x.data(), x.size(), o);
}

// Per block: the largest finite magnitude, the scale, the codes. One function for the
// whole tensor, so that the vectorised inner loops are not behind a call per block.
template <bool E4M3>
inline void fp8_blocks(const float* x, std::size_t n, std::size_t block, std::size_t blocks,
                       float* scales, std::uint8_t* codes) {
  const float fmax = E4M3 ? math::kE4m3Max : math::kE5m2Max;
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t begin = b * block, len = std::min(block, n - begin);
    std::int32_t m = 0;
    for (std::size_t i = 0; i < len; ++i) {
      const auto a = static_cast<std::int32_t>(math::finite_magnitude_bits(x[begin + i]));
      m = a > m ? a : m;
    }
    const math::Scale s = math::block_scale(math::float_of(std::uint32_t(m)), fmax, 1.0f);
    std::memcpy(scales + b, &s.scale, 4);
    for (std::size_t i = 0; i < len; ++i)
      codes[begin + i] =
          E4M3 ? math::f32_to_e4m3(x[begin + i] * s.inv) : math::f32_to_e5m2(x[begin + i] * s.inv);
  }
}
HGSIM_HOT void e4m3_blocks(const float* x, std::size_t n, std::size_t block, std::size_t blocks,
                           float* scales, std::uint8_t* codes) {
  fp8_blocks<true>(x, n, block, blocks, scales, codes);
}
HGSIM_HOT void e5m2_blocks(const float* x, std::size_t n, std::size_t block, std::size_t blocks,
                           float* scales, std::uint8_t* codes) {
  fp8_blocks<false>(x, n, block, blocks, scales, codes);
}

void encode_fp8(const CodecSpec& spec, std::span<const float> x, std::byte* body) {
  const std::size_t n = x.size();
  const bool per_block = spec.scaling == Scaling::per_block;
  const std::size_t block = per_block ? spec.block : std::max<size_t>(n, 1);
  const std::size_t blocks = per_block ? ceil_div(n, block) : 1;
  auto* scales = reinterpret_cast<float*>(body);  // body is 8-byte aligned (after the header)
  auto* codes = reinterpret_cast<std::uint8_t*>(body + 4 * blocks);
  if (spec.kind == CodecKind::fp8_e4m3)
    e4m3_blocks(x.data(), n, block, blocks, scales, codes);
  else
    e5m2_blocks(x.data(), n, block, blocks, scales, codes);
}

// int8 (QMAX 127) and int4 (QMAX 7) block absmax.

template <int QMAX>
void encode_int(const CodecSpec& spec, std::span<const float> x, std::uint64_t seed,
                std::byte* body) {
  const std::size_t n = x.size(), block = spec.block, blocks = ceil_div(n, block);
  auto* scales = reinterpret_cast<float*>(body);
  std::byte* payload = body + 4 * blocks;
  std::vector<std::int8_t> q(QMAX == 7 ? block : 0);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::size_t begin = b * block, len = std::min(block, n - begin);
    const float amax = math::float_of(max_magnitude_bits(x.data() + begin, len));
    const math::Scale s = math::block_scale(amax, float(QMAX), 0.0f);
    std::memcpy(scales + b, &s.scale, 4);
    const float inv = s.inv;
    std::int8_t* codes = QMAX == 127 ? reinterpret_cast<std::int8_t*>(payload) + begin : q.data();
    if (spec.stochastic_rounding)
      quantize_stochastic_run(x.data() + begin, len, begin, amax, inv, float(QMAX), seed, codes);
    else
      quantize_run(x.data() + begin, len, amax, inv, float(QMAX), codes);
    if constexpr (QMAX == 7) {  // two per byte, the even element in the low nibble
      auto* packed = reinterpret_cast<std::uint8_t*>(payload) + begin / 2;
      const std::size_t pairs = len / 2;
      for (std::size_t i = 0; i < pairs; ++i)
        packed[i] = static_cast<std::uint8_t>((codes[2 * i] & 0xF) | (codes[2 * i + 1] << 4));
      if (len % 2) packed[pairs] = static_cast<std::uint8_t>(codes[len - 1] & 0xF);
    }
  }
}

void encode_sparse(ConstTensor input, const std::vector<std::uint64_t>& idx, bool with_indices,
                   std::byte* body) {
  const std::size_t es = element_size(input.dtype);
  std::byte* values = body;
  if (with_indices) {
    const std::size_t w = index_width(input.count);
    for (std::size_t j = 0; j < idx.size(); ++j) std::memcpy(body + j * w, &idx[j], w);
    values = body + idx.size() * w;
  }
  const auto* src = static_cast<const std::byte*>(input.data);
  for (std::size_t j = 0; j < idx.size(); ++j) std::memcpy(values + j * es, src + idx[j] * es, es);
}

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// A cols x rank matrix of standard normal values drawn from `seed` (Box-Muller).
RowMatrix random_q(std::uint64_t seed, Eigen::Index cols, Eigen::Index rank) {
  RowMatrix q(cols, rank);
  for (Eigen::Index i = 0; i < q.size(); ++i) {
    const double u1 = (math::uniform01(seed, 2 * i) + 0x1p-25);
    const double u2 = math::uniform01(seed, 2 * i + 1);
    q.data()[i] =
        static_cast<float>(std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2));
  }
  return q;
}

// One PowerSGD step (Vogels et al. 2019, Algorithm 1 without the all-reduces): P = M Q,
// P orthonormalised, Q = M^T P; M ~ P Q^T. `q` is the starting Q (cols x rank) and becomes
// the new one (the warm start for the next step). A cold start (`cold`) first runs one
// extra power iteration: a random Q can be badly conditioned, and one iteration from it
// loses digits even on a matrix of rank <= r (seen as a flaky exactness test); a rank that
// covers every column starts from the identity, which makes P Q^T = M to rounding.
void encode_powersgd(std::span<const float> m, std::uint64_t rows, std::uint64_t cols, RowMatrix& q,
                     bool cold, std::byte* body) {
  Eigen::Map<const RowMatrix> M(m.data(), rows, cols);
  const Eigen::Index rank = q.cols();
  auto orthonormal = [&](const RowMatrix& a) -> RowMatrix {
    Eigen::HouseholderQR<RowMatrix> qr(a);
    return qr.householderQ() * RowMatrix::Identity(a.rows(), a.cols());
  };
  if (cold && rank == Eigen::Index(cols)) q = RowMatrix::Identity(cols, rank);
  RowMatrix p = orthonormal(M * q);
  if (cold && rank < Eigen::Index(cols)) p = orthonormal(M * (M.transpose() * p));
  q = M.transpose() * p;
  std::memcpy(body, p.data(), 4 * p.size());
  std::memcpy(body + 4 * p.size(), q.data(), 4 * q.size());
}

// ---- the one encoder -----------------------------------------------------------------------

struct Prepared {
  CodecSpec spec;
  std::uint64_t n;
  std::size_t bytes;
};

Prepared prepare(const CodecSpec& spec, std::span<const std::int64_t> shape, ConstTensor input,
                 std::span<std::byte> out) {
  const std::uint64_t n = element_count(shape);
  if (n != input.count)
    throw CodecError("encode: the shape has " + std::to_string(n) + " elements, the input " +
                     std::to_string(input.count));
  if (n > 0 && input.data == nullptr) throw CodecError("encode: the input has no data");
  const std::size_t bytes = encoded_bytes(spec, shape, input.dtype);
  if (reinterpret_cast<std::uintptr_t>(out.data()) % 4 != 0)
    throw CodecError("encode: the output buffer must start at a 4-byte aligned address");
  if (out.size() != bytes)
    throw CodecError("encode: the output holds " + std::to_string(out.size()) +
                     " bytes, the encoding needs exactly " + std::to_string(bytes));
  return {effective_spec(spec, shape), n, bytes};
}

// Encodes with an explicit starting Q for PowerSGD (TensorCodec passes its warm start).
void encode_with(const CodecSpec& requested, std::span<const std::int64_t> shape, ConstTensor input,
                 std::span<std::byte> out, std::uint64_t key, RowMatrix* warm_q) {
  const Prepared p = prepare(requested, shape, input, out);
  const CodecSpec& spec = p.spec;
  const std::uint64_t n = p.n;
  Header h{spec.kind, input.dtype, 0, n, 0, 0, 0, 0};
  std::byte* body = out.data() + kHeaderBytes;
  switch (spec.kind) {
    case CodecKind::none:
      if (n) std::memcpy(body, input.data, n * element_size(input.dtype));
      break;
    case CodecKind::fp16:
    case CodecKind::bf16:
      if ((input.dtype == DType::fp16 && spec.kind == CodecKind::fp16) ||
          (input.dtype == DType::bf16 && spec.kind == CodecKind::bf16)) {
        if (n) std::memcpy(body, input.data, 2 * n);
      } else {
        encode_half(spec.kind, F32(input).span(), body);
      }
      break;
    case CodecKind::fp8_e4m3:
    case CodecKind::fp8_e5m2:
      if (spec.scaling == Scaling::per_block) {
        h.flags |= kFlagPerBlock;
        h.a = static_cast<std::uint32_t>(spec.block);
      }
      encode_fp8(spec, F32(input).span(), body);
      break;
    case CodecKind::int8:
    case CodecKind::int4:
      h.a = static_cast<std::uint32_t>(spec.block);
      if (spec.stochastic_rounding) h.flags |= kFlagStochastic;
      if (spec.kind == CodecKind::int8)
        encode_int<127>(spec, F32(input).span(), key, body);
      else
        encode_int<7>(spec, F32(input).span(), key, body);
      break;
    case CodecKind::topk:
      h.kept = kept_elements(spec.ratio, n);
      encode_sparse(input, topk_indices(F32(input).span(), h.kept), true, body);
      break;
    case CodecKind::randomk:
      h.kept = kept_elements(spec.ratio, n);
      h.seed = key;
      encode_sparse(input, random_indices(key, n, h.kept), false, body);
      break;
    case CodecKind::powersgd: {
      const std::uint64_t cols = static_cast<std::uint64_t>(shape.back()), rows = n / cols;
      const int rank = effective_rank(spec.rank, shape);
      h.a = static_cast<std::uint32_t>(rank);
      h.b = static_cast<std::uint32_t>(cols);
      const bool warm = warm_q && warm_q->rows() == Eigen::Index(cols) && warm_q->cols() == rank;
      RowMatrix q = warm ? *warm_q : random_q(key, Eigen::Index(cols), rank);
      encode_powersgd(F32(input).span(), rows, cols, q, !warm, body);
      if (warm_q) *warm_q = std::move(q);
      break;
    }
  }
  write_header(out.data(), h);
}

// ---- decoders ------------------------------------------------------------------------------

constexpr std::size_t kChunk = 4096;

// Calls fill(begin, len, float* tmp) for consecutive chunks, then stores tmp into out.
template <class Fill>
void decode_chunks(std::uint64_t n, MutableTensor out, Fill fill) {
  float tmp[kChunk];
  for (std::uint64_t begin = 0; begin < n; begin += kChunk) {
    const std::size_t len = std::min<std::uint64_t>(kChunk, n - begin);
    if (out.dtype == DType::fp32) {
      fill(begin, len, static_cast<float*>(out.data) + begin);
    } else {
      fill(begin, len, tmp);
      store({tmp, len}, out, begin);
    }
  }
}

// Like decode_chunks, but runs also end at block boundaries (one scale per run).
template <class Fill>
void decode_runs(std::uint64_t n, std::uint64_t block, MutableTensor out, Fill fill) {
  float tmp[kChunk];
  std::uint64_t begin = 0;
  while (begin < n) {
    const std::uint64_t block_end = std::min(n, (begin / block + 1) * block);
    const std::size_t len = std::min<std::uint64_t>(kChunk, block_end - begin);
    if (out.dtype == DType::fp32) {
      fill(begin, len, static_cast<float*>(out.data) + begin);
    } else {
      fill(begin, len, tmp);
      store({tmp, len}, out, begin);
    }
    begin += len;
  }
}

void decode_body(const EncodedInfo& info, const std::byte* body, MutableTensor out) {
  const std::uint64_t n = info.count;
  switch (info.kind) {
    case CodecKind::none:
      if (out.dtype == info.dtype) {
        if (n) std::memcpy(out.data, body, n * element_size(info.dtype));
        return;
      }
      decode_chunks(n, out, [&](std::uint64_t begin, std::size_t len, float* o) {
        for (std::size_t i = 0; i < len; ++i) o[i] = load_one(body, info.dtype, begin + i);
      });
      return;
    case CodecKind::fp16:
    case CodecKind::bf16: {
      const DType wire = info.kind == CodecKind::fp16 ? DType::fp16 : DType::bf16;
      if (out.dtype == wire) {
        if (n) std::memcpy(out.data, body, 2 * n);
        return;
      }
      decode_chunks(n, out, [&](std::uint64_t begin, std::size_t len, float* o) {
        const auto* src = reinterpret_cast<const std::uint16_t*>(body) + begin;
        if (wire == DType::fp16)
          f16_to_f32_run(src, len, o);
        else
          bf16_to_f32_run(src, len, o);
      });
      return;
    }
    case CodecKind::fp8_e4m3:
    case CodecKind::fp8_e5m2: {
      const bool e4m3 = info.kind == CodecKind::fp8_e4m3;
      const std::uint64_t block = info.per_block ? info.block : std::max<std::uint64_t>(n, 1);
      const std::uint64_t blocks = info.per_block ? ceil_div(n, block) : 1;
      const auto* codes = reinterpret_cast<const std::uint8_t*>(body + 4 * blocks);
      decode_runs(n, block, out, [&](std::uint64_t begin, std::size_t len, float* o) {
        const float scale = get<float>(body + 4 * (begin / block));
        if (e4m3)
          e4m3_to_f32_run(codes + begin, len, scale, o);
        else
          e5m2_to_f32_run(codes + begin, len, scale, o);
      });
      return;
    }
    case CodecKind::int8:
    case CodecKind::int4: {
      const std::uint64_t block = info.block, blocks = ceil_div(n, block);
      const std::byte* payload = body + 4 * blocks;
      decode_runs(n, block, out, [&](std::uint64_t begin, std::size_t len, float* o) {
        const float scale = get<float>(body + 4 * (begin / block));
        if (info.kind == CodecKind::int8)
          dequantize_int8_run(reinterpret_cast<const std::int8_t*>(payload) + begin, len, scale, o);
        else  // runs start at even elements: blocks and chunks are even
          dequantize_int4_run(reinterpret_cast<const std::uint8_t*>(payload) + begin / 2, len,
                              scale, o);
      });
      return;
    }
    case CodecKind::topk:
    case CodecKind::randomk: {
      std::vector<std::uint64_t> idx;
      const std::byte* values = body;
      if (info.kind == CodecKind::topk) {
        const std::size_t w = index_width(n);
        idx.resize(info.kept);
        for (std::uint64_t j = 0; j < info.kept; ++j) {
          std::uint64_t i = 0;
          std::memcpy(&i, body + j * w, w);
          if (i >= n)
            bad("top-k index " + std::to_string(i) + " is beyond the tensor's " +
                std::to_string(n) + " elements");
          if (j > 0 && i <= idx[j - 1]) bad("top-k indices are not strictly increasing");
          idx[j] = i;
        }
        values = body + info.kept * w;
      } else {
        idx = random_indices(info.seed, n, info.kept);
      }
      const std::size_t es = element_size(out.dtype);
      if (n) std::memset(out.data, 0, n * es);
      if (out.dtype == info.dtype) {  // exact: copy the bits (NaN payloads included)
        for (std::uint64_t j = 0; j < info.kept; ++j)
          std::memcpy(static_cast<std::byte*>(out.data) + idx[j] * es, values + j * es, es);
        return;
      }
      for (std::uint64_t j = 0; j < info.kept; ++j) {
        const float v = load_one(values, info.dtype, j);
        store({&v, 1}, out, idx[j]);
      }
      return;
    }
    case CodecKind::powersgd: {
      const Eigen::Index rows = info.rows, cols = info.cols, rank = info.rank;
      RowMatrix p(rows, rank), q(cols, rank);
      std::memcpy(p.data(), body, 4 * p.size());
      std::memcpy(q.data(), body + 4 * p.size(), 4 * q.size());
      if (out.dtype == DType::fp32) {
        Eigen::Map<RowMatrix>(static_cast<float*>(out.data), rows, cols).noalias() =
            p * q.transpose();
      } else {
        RowMatrix m = p * q.transpose();
        store({m.data(), static_cast<std::size_t>(m.size())}, out, 0);
      }
      return;
    }
  }
}

}  // namespace

// ---- public --------------------------------------------------------------------------------

std::string to_string(DType d) {
  switch (d) {
    case DType::fp32:
      return "fp32";
    case DType::fp16:
      return "fp16";
    case DType::bf16:
      return "bf16";
  }
  return "?";
}

std::size_t element_size(DType d) {
  return d == DType::fp32 ? 4 : 2;
}

std::uint64_t element_count(std::span<const std::int64_t> shape) {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) throw CodecError("shape: negative dimension " + std::to_string(d));
    if (d == 0) return 0;
    // Divided, not multiplied: 2^32 x 2^32 wraps a 64-bit product around to 0.
    if (static_cast<std::uint64_t>(d) > kMaxCount / n)
      throw CodecError("shape: more than 2^40 elements");
    n *= static_cast<std::uint64_t>(d);
  }
  return n;
}

bool is_matrix(std::span<const std::int64_t> shape) {
  if (shape.size() < 2) return false;
  const std::uint64_t n = element_count(shape);
  const std::int64_t cols = shape.back();
  if (cols < 2 || cols > std::int64_t(UINT32_MAX) || n == 0) return false;
  return n / static_cast<std::uint64_t>(cols) >= 2;
}

CodecSpec effective_spec(const CodecSpec& spec, std::span<const std::int64_t> shape) {
  CodecSpec s = spec;
  if (s.kind == CodecKind::powersgd && !is_matrix(shape)) {
    CodecSpec fallback;
    fallback.kind = s.fallback == CodecKind::powersgd ? CodecKind::none : s.fallback;
    s = fallback;
  }
  if ((s.kind == CodecKind::int8 || s.kind == CodecKind::int4) && s.block <= 0)
    s.block = kDefaultBlock;
  if (s.kind == CodecKind::int4 && s.block % 2) s.block += 1;  // pairs must not straddle blocks
  if (is_fp8(s.kind) && s.scaling == Scaling::per_block && s.block <= 0) s.block = kDefaultBlock;
  if (is_fp8(s.kind) && s.scaling == Scaling::per_tensor) s.block = 0;
  if ((s.kind == CodecKind::topk || s.kind == CodecKind::randomk) && !(s.ratio > 0 && s.ratio <= 1))
    s.ratio = s.ratio > 1 ? 1 : 0.01;  // out-of-range ratios (the catalog refuses them) clamp
  if (s.kind == CodecKind::powersgd && s.rank < 1) s.rank = 1;
  return s;
}

std::uint64_t kept_elements(double ratio, std::uint64_t n) {
  if (n == 0) return 0;
  const double want = std::ceil(ratio * static_cast<double>(n));
  if (!(want >= 1)) return 1;
  if (want >= static_cast<double>(n)) return n;
  return static_cast<std::uint64_t>(want);
}

int effective_rank(int rank, std::span<const std::int64_t> shape) {
  const std::uint64_t n = element_count(shape);
  const std::uint64_t cols = shape.empty() ? 1 : static_cast<std::uint64_t>(shape.back());
  const std::uint64_t rows = cols ? n / cols : 0;
  return static_cast<int>(
      std::min<std::uint64_t>({static_cast<std::uint64_t>(std::max(rank, 1)), rows, cols}));
}

std::size_t encoded_bytes(const CodecSpec& requested, std::span<const std::int64_t> shape,
                          DType dtype) {
  const CodecSpec spec = effective_spec(requested, shape);
  const std::uint64_t n = element_count(shape);
  std::uint64_t rows = 0, cols = 0, rank = 0;
  if (spec.kind == CodecKind::powersgd) {
    cols = static_cast<std::uint64_t>(shape.back());
    rows = n / cols;
    rank = static_cast<std::uint64_t>(effective_rank(spec.rank, shape));
  }
  return kHeaderBytes + body_bytes(spec.kind, dtype, n, static_cast<std::uint64_t>(spec.block),
                                   spec.scaling == Scaling::per_block, kept_elements(spec.ratio, n),
                                   rows, cols, rank);
}

EncodedInfo inspect(std::span<const std::byte> buf) {
  if (buf.size() < kHeaderBytes)
    bad(std::to_string(buf.size()) + " bytes is shorter than the " + std::to_string(kHeaderBytes) +
        "-byte header (truncated?)");
  const std::byte* p = buf.data();
  if (std::memcmp(p, kMagic, 4) != 0) bad("no 'HGCD' magic: not an hgsim encoding");
  if (get<std::uint8_t>(p + 4) != kVersion)
    bad("format version " + std::to_string(get<std::uint8_t>(p + 4)) + ", this build reads " +
        std::to_string(kVersion));
  const std::uint8_t kind = get<std::uint8_t>(p + 5), dtype = get<std::uint8_t>(p + 6),
                     flags = get<std::uint8_t>(p + 7);
  if (kind > static_cast<std::uint8_t>(CodecKind::powersgd))
    bad("unknown codec id " + std::to_string(kind));
  if (dtype > static_cast<std::uint8_t>(DType::bf16))
    bad("unknown dtype id " + std::to_string(dtype));
  EncodedInfo info;
  info.kind = static_cast<CodecKind>(kind);
  info.dtype = static_cast<DType>(dtype);
  info.count = get<std::uint64_t>(p + 8);
  const std::uint32_t a = get<std::uint32_t>(p + 16), b = get<std::uint32_t>(p + 20);
  const std::uint64_t kept = get<std::uint64_t>(p + 24), seed = get<std::uint64_t>(p + 32);
  if (info.count > kMaxCount) bad("element count " + std::to_string(info.count) + " above 2^40");
  // Decoding allocates what the header claims: a damaged or forged header may not claim
  // more than the limit (core/limits.hpp, HGSIM_MAX_CODEC_ELEMENTS), whatever the buffer's size.
  const auto limit = static_cast<std::uint64_t>(core::limits().codec_elements);
  if (info.count > limit)
    bad("the header claims " + std::to_string(info.count) + " elements; " +
        core::limit_hint("HGSIM_MAX_CODEC_ELEMENTS", static_cast<double>(limit)));
  const std::uint64_t n = info.count;
  // Fields a codec does not use must be zero: damage there is detected too.
  auto unused = [&](bool a_used, bool b_used, bool kept_used, bool seed_used,
                    std::uint8_t ok_flags) {
    if ((!a_used && a) || (!b_used && b) || (!kept_used && kept) || (!seed_used && seed) ||
        (flags & ~ok_flags))
      bad(std::string("header fields that ") + codec_name(info.kind) +
          " does not use are not zero");
  };
  switch (info.kind) {
    case CodecKind::none:
    case CodecKind::fp16:
    case CodecKind::bf16:
      unused(false, false, false, false, 0);
      break;
    case CodecKind::fp8_e4m3:
    case CodecKind::fp8_e5m2:
      info.per_block = flags & kFlagPerBlock;
      unused(info.per_block, false, false, false, kFlagPerBlock);
      if (info.per_block && a == 0) bad("fp8 per-block scaling with block size 0");
      info.block = a;
      break;
    case CodecKind::int8:
    case CodecKind::int4:
      unused(true, false, false, false, kFlagStochastic);
      if (a == 0) bad("block size 0");
      if (info.kind == CodecKind::int4 && a % 2)
        bad("int4 block size " + std::to_string(a) + " is odd");
      info.block = a;
      break;
    case CodecKind::topk:
    case CodecKind::randomk:
      unused(false, false, true, info.kind == CodecKind::randomk, 0);
      if (kept > n) bad(std::to_string(kept) + " elements kept out of " + std::to_string(n));
      if (n > 0 && kept == 0) bad("no element kept out of " + std::to_string(n));
      // No encoder keeps fewer than ratio x n with ratio >= 1e-6 (the catalog's floor), so
      // a header that expands a few kept values into many more is damaged or forged.
      if ((kept << kMinKeptShift) < n)
        bad(std::to_string(kept) + " elements kept out of " + std::to_string(n) +
            ": fewer than one in 2^20, below any ratio an encoder uses");
      info.kept = kept;
      info.seed = seed;
      break;
    case CodecKind::powersgd:
      unused(true, true, false, false, 0);
      if (b < 2 || n % b != 0 || n / b < 2)
        bad("PowerSGD: " + std::to_string(n) + " elements are not a matrix with " +
            std::to_string(b) + " columns");
      if (a < 1 || a > std::min<std::uint64_t>(b, n / b))
        bad("PowerSGD rank " + std::to_string(a) + " for a " + std::to_string(n / b) + " x " +
            std::to_string(b) + " matrix");
      info.cols = b;
      info.rows = static_cast<std::uint32_t>(std::min<std::uint64_t>(n / b, UINT32_MAX));
      if (n / b > UINT32_MAX) bad("PowerSGD: more than 2^32 rows");
      info.rank = a;
      break;
  }
  info.total_bytes = kHeaderBytes + body_bytes(info.kind, info.dtype, n, info.block, info.per_block,
                                               info.kept, info.rows, info.cols, info.rank);
  if (buf.size() != info.total_bytes)
    bad(std::to_string(buf.size()) + " bytes, but its header describes " +
        std::to_string(info.total_bytes) + (buf.size() < info.total_bytes ? " (truncated)" : ""));
  return info;
}

void encode(const CodecSpec& spec, std::span<const std::int64_t> shape, ConstTensor input,
            std::span<std::byte> out, std::uint64_t seed) {
  encode_with(spec, shape, input, out, derive_seed(spec.seed, seed), nullptr);
}

std::vector<std::byte> encode(const CodecSpec& spec, std::span<const std::int64_t> shape,
                              ConstTensor input, std::uint64_t seed) {
  std::vector<std::byte> out(encoded_bytes(spec, shape, input.dtype));
  encode(spec, shape, input, out, seed);
  return out;
}

void decode(std::span<const std::byte> encoded, MutableTensor out) {
  const EncodedInfo info = inspect(encoded);
  if (reinterpret_cast<std::uintptr_t>(encoded.data()) % 4 != 0)
    throw CodecError("decode: the encoded buffer must start at a 4-byte aligned address");
  if (out.count != info.count)
    throw CodecError("decode: the buffer holds " + std::to_string(info.count) +
                     " elements, the output has room for " + std::to_string(out.count));
  if (info.count > 0 && out.data == nullptr) throw CodecError("decode: the output has no data");
  decode_body(info, encoded.data() + kHeaderBytes, out);
}

// ---- GPU ---------------------------------------------------------------------------------

bool cuda_available(std::string* why) {
  std::string reason;
  const bool ok = cuda::available(reason);
  if (why) *why = reason;
  return ok;
}

bool cuda_supports(CodecKind kind) {
  return cuda::supports(static_cast<int>(kind));
}

namespace {

// encode_with() on the GPU: the header here, the body from the kernels. `warm_q` as there.
void encode_cuda_with(const CodecSpec& requested, std::span<const std::int64_t> shape,
                      ConstTensor input, std::span<std::byte> out, std::uint64_t key,
                      RowMatrix* warm_q) {
  const Prepared p = prepare(requested, shape, input, out);
  const CodecSpec& spec = p.spec;
  if (!cuda_supports(spec.kind))
    throw CodecError("encode_cuda: no CUDA kernel for " + std::string(codec_name(spec.kind)));
  Header h{spec.kind, input.dtype, 0, p.n, 0, 0, 0, 0};
  cuda::BodyParams params;
  params.kind = static_cast<int>(spec.kind);
  params.dtype = static_cast<int>(input.dtype);
  params.count = p.n;
  std::vector<std::uint64_t> indices;  // random-k
  RowMatrix q;                         // PowerSGD
  if (is_fp8(spec.kind)) {
    const bool per_block = spec.scaling == Scaling::per_block;
    if (per_block) h.flags |= kFlagPerBlock, h.a = static_cast<std::uint32_t>(spec.block);
    params.block =
        per_block ? static_cast<std::uint64_t>(spec.block) : std::max<std::uint64_t>(p.n, 1);
  } else if (spec.kind == CodecKind::int8 || spec.kind == CodecKind::int4) {
    h.a = static_cast<std::uint32_t>(spec.block);
    if (spec.stochastic_rounding) h.flags |= kFlagStochastic;
    params.block = static_cast<std::uint64_t>(spec.block);
    params.stochastic = spec.stochastic_rounding;
    params.seed = key;
  } else if (spec.kind == CodecKind::topk) {
    h.kept = kept_elements(spec.ratio, p.n);
    params.kept = h.kept;
    params.index_width = index_width(p.n);
  } else if (spec.kind == CodecKind::randomk) {
    h.kept = kept_elements(spec.ratio, p.n);
    h.seed = key;
    // Floyd's algorithm is sequential (each draw depends on the indices drawn before), so
    // the host draws them with the CPU's own function; the device gathers the values.
    indices = random_indices(key, p.n, h.kept);
    params.kept = h.kept;
    params.indices = indices.data();
  } else if (spec.kind == CodecKind::powersgd) {
    const std::uint64_t cols = static_cast<std::uint64_t>(shape.back()), rows = p.n / cols;
    const int rank = effective_rank(spec.rank, shape);
    h.a = static_cast<std::uint32_t>(rank);
    h.b = static_cast<std::uint32_t>(cols);
    const bool warm = warm_q && warm_q->rows() == Eigen::Index(cols) && warm_q->cols() == rank;
    q = warm ? *warm_q : random_q(key, Eigen::Index(cols), rank);  // the CPU's Q0
    params.rows = rows;
    params.cols = cols;
    params.rank = static_cast<std::uint64_t>(rank);
    params.q = q.data();  // replaced by the new Q
    params.cold = !warm;
  }
  std::string error;
  if (!cuda::encode_body_host(params, input.data, p.n * element_size(input.dtype),
                              out.data() + kHeaderBytes, out.size() - kHeaderBytes, error))
    throw CodecError("encode_cuda: " + error);
  write_header(out.data(), h);
  if (warm_q && spec.kind == CodecKind::powersgd) *warm_q = std::move(q);
}

}  // namespace

void encode_cuda(const CodecSpec& requested, std::span<const std::int64_t> shape, ConstTensor input,
                 std::span<std::byte> out, std::uint64_t seed) {
  encode_cuda_with(requested, shape, input, out, derive_seed(requested.seed, seed), nullptr);
}

void decode_cuda(std::span<const std::byte> encoded, std::span<float> out) {
  const EncodedInfo info = inspect(encoded);
  if (!cuda_supports(info.kind))
    throw CodecError("decode_cuda: no CUDA kernel for " + std::string(codec_name(info.kind)));
  if (out.size() != info.count)
    throw CodecError("decode_cuda: the buffer holds " + std::to_string(info.count) +
                     " elements, the output has room for " + std::to_string(out.size()));
  cuda::BodyParams params;
  params.kind = static_cast<int>(info.kind);
  params.dtype = static_cast<int>(info.dtype);
  params.count = info.count;
  params.block =
      is_fp8(info.kind) && !info.per_block ? std::max<std::uint64_t>(info.count, 1) : info.block;
  params.kept = info.kept;
  std::vector<std::uint64_t> indices;
  if (info.kind == CodecKind::topk) params.index_width = index_width(info.count);
  if (info.kind == CodecKind::randomk) {  // drawn on the host, as when encoding
    indices = random_indices(info.seed, info.count, info.kept);
    params.indices = indices.data();
  }
  params.rows = info.rows;
  params.cols = info.cols;
  params.rank = info.rank;
  std::string error;
  if (!cuda::decode_body_host(params, encoded.data() + kHeaderBytes, encoded.size() - kHeaderBytes,
                              out.data(), error))
    throw CodecError("decode_cuda: " + error);
}

// ---- TensorCodec ---------------------------------------------------------------------------

TensorCodec::TensorCodec(const CodecSpec& spec, Shape shape, DType dtype, Device device)
    : spec_(effective_spec(spec, shape)),
      shape_(std::move(shape)),
      dtype_(dtype),
      device_(device),
      bytes_(compress::encoded_bytes(spec_, shape_, dtype_)) {
  const bool ef =
      spec_.error_feedback && (spec_.kind == CodecKind::topk || spec_.kind == CodecKind::randomk ||
                               spec_.kind == CodecKind::powersgd);
  if (ef) residual_.assign(element_count(shape_), 0.0f);
}

void TensorCodec::encode(ConstTensor input, std::span<std::byte> out) {
  const std::uint64_t key = derive_seed(spec_.seed, step_);
  RowMatrix warm;
  RowMatrix* warm_ptr = nullptr;
  if (spec_.kind == CodecKind::powersgd && spec_.warm_start) {
    warm_ptr = &warm;
    if (!warm_q_.empty()) {
      const Eigen::Index cols = shape_.back(), rank = effective_rank(spec_.rank, shape_);
      warm = Eigen::Map<RowMatrix>(warm_q_.data(), cols, rank);
    }
  }
  auto encode_step = [&](ConstTensor what) {
    if (device_ == Device::cuda)
      encode_cuda_with(spec_, shape_, what, out, key, warm_ptr);
    else
      encode_with(spec_, shape_, what, out, key, warm_ptr);
  };
  if (residual_.empty()) {
    encode_step(input);
  } else {
    if (input.count != residual_.size())
      throw CodecError("encode: the codec was made for " + std::to_string(residual_.size()) +
                       " elements, the input has " + std::to_string(input.count));
    // Send input + residual; keep what the encoding lost for the next step.
    std::vector<float> acc(residual_.size());
    for (std::size_t i = 0; i < acc.size(); ++i)
      acc[i] = load_one(input.data, input.dtype, i) + residual_[i];
    ConstTensor to_send{std::span<const float>(acc)};
    std::vector<Half> as_fp16;
    std::vector<BFloat16> as_bf16;
    if (dtype_ == DType::fp16) {  // the wire carries the tensor's own dtype
      as_fp16.resize(acc.size());
      convert(to_send, std::span<Half>(as_fp16));
      to_send = std::span<const Half>(as_fp16);
    } else if (dtype_ == DType::bf16) {
      as_bf16.resize(acc.size());
      convert(to_send, std::span<BFloat16>(as_bf16));
      to_send = std::span<const BFloat16>(as_bf16);
    }
    encode_step(to_send);
    std::vector<float> sent(acc.size());
    decode(out, MutableTensor(std::span<float>(sent)));
    for (std::size_t i = 0; i < acc.size(); ++i) residual_[i] = acc[i] - sent[i];
  }
  if (warm_ptr) warm_q_.assign(warm.data(), warm.data() + warm.size());
  ++step_;
}

std::vector<std::byte> TensorCodec::encode(ConstTensor input) {
  std::vector<std::byte> out(bytes_);
  encode(input, out);
  return out;
}

// ---- utilities -----------------------------------------------------------------------------

double relative_l2_error(std::span<const float> x, std::span<const float> y) {
  double diff = 0, norm = 0;
  const std::size_t n = std::min(x.size(), y.size());
  for (std::size_t i = 0; i < n; ++i) {
    const double d = double(x[i]) - double(y[i]);
    diff += d * d;
    norm += double(x[i]) * double(x[i]);
  }
  if (norm == 0) return diff == 0 ? 0 : INFINITY;
  return std::sqrt(diff / norm);
}

void convert(ConstTensor from, MutableTensor to) {
  if (from.count != to.count)
    throw CodecError("convert: " + std::to_string(from.count) + " elements into " +
                     std::to_string(to.count));
  if (from.dtype == to.dtype) {
    if (from.count) std::memcpy(to.data, from.data, from.count * element_size(from.dtype));
    return;
  }
  if (from.dtype == DType::fp32) {
    store({static_cast<const float*>(from.data), from.count}, to, 0);
    return;
  }
  const auto* h = static_cast<const std::uint16_t*>(from.data);
  float tmp[kChunk];
  for (std::size_t begin = 0; begin < from.count; begin += kChunk) {
    const std::size_t len = std::min(kChunk, from.count - begin);
    float* o = to.dtype == DType::fp32 ? static_cast<float*>(to.data) + begin : tmp;
    if (from.dtype == DType::fp16)
      f16_to_f32_run(h + begin, len, o);
    else
      bf16_to_f32_run(h + begin, len, o);
    if (to.dtype != DType::fp32) store({tmp, len}, to, begin);
  }
}

}  // namespace hgsim::compress
