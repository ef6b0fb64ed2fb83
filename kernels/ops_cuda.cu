// The CUDA ops (see ops_cuda.hpp): cuBLASLt GEMMs and simple grid-stride / block-per-row
// kernels, templated on the storage type (float, half, bfloat16; fp8 e4m3 for GEMM inputs),
// math in fp32. C++17 (nvcc); talks to the C++20 side only through ops_cuda.hpp.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/ops_cuda.hpp"

namespace hgsim::kernels::gpu {
namespace {

struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(status));
}
void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw CudaError(std::string(what) + ": cuBLAS status " + std::to_string(int(status)));
}

// ---- storage types -----------------------------------------------------------------------

enum class Storage { f32, f16, bf16, f8 };

std::size_t storage_bytes(Storage s) {
  switch (s) {
    case Storage::f32:
      return 4;
    case Storage::f16:
    case Storage::bf16:
      return 2;
    case Storage::f8:
      return 1;
  }
  return 4;
}

bool is_gemm(const std::string& op) {
  return op == "gemm" || op == "gemm_dgrad" || op == "gemm_wgrad";
}

Storage storage_for(const std::string& dtype, bool gemm) {
  if (dtype == "fp32" || dtype == "tf32") return Storage::f32;
  if (dtype == "fp16") return Storage::f16;
  if (dtype == "bf16") return Storage::bf16;
  if (dtype == "fp8") return gemm ? Storage::f8 : Storage::bf16;
  throw CudaError("unknown dtype " + dtype);
}

__device__ inline float load(const float* p, std::size_t i) {
  return p[i];
}
__device__ inline float load(const __half* p, std::size_t i) {
  return __half2float(p[i]);
}
__device__ inline float load(const __nv_bfloat16* p, std::size_t i) {
  return __bfloat162float(p[i]);
}
__device__ inline float load(const __nv_fp8_e4m3* p, std::size_t i) {
  return float(p[i]);
}
__device__ inline void store(float* p, std::size_t i, float v) {
  p[i] = v;
}
__device__ inline void store(__half* p, std::size_t i, float v) {
  p[i] = __float2half(v);
}
__device__ inline void store(__nv_bfloat16* p, std::size_t i, float v) {
  p[i] = __float2bfloat16(v);
}
__device__ inline void store(__nv_fp8_e4m3* p, std::size_t i, float v) {
  p[i] = __nv_fp8_e4m3(v);
}

template <class F>
void dispatch(Storage s, F&& f) {
  switch (s) {
    case Storage::f32:
      return f(static_cast<float*>(nullptr));
    case Storage::f16:
      return f(static_cast<__half*>(nullptr));
    case Storage::bf16:
      return f(static_cast<__nv_bfloat16*>(nullptr));
    case Storage::f8:
      return f(static_cast<__nv_fp8_e4m3*>(nullptr));
  }
}

constexpr int kThreads = 256;
int blocks_for(std::size_t n) {
  return int(std::min<std::size_t>((n + kThreads - 1) / kThreads, 65535));
}
#define GRID_STRIDE(i, n)                                                           \
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < (n); \
       i += std::size_t(gridDim.x) * blockDim.x)

__device__ inline unsigned hash(unsigned x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

template <class T>
__global__ void fill_random(T* p, std::size_t n, unsigned seed, float lo, float hi) {
  GRID_STRIDE(i, n) {
    const float u = float(hash(unsigned(i) * 2654435761U ^ seed) & 0xffffff) / float(0x1000000);
    store(p, i, lo + (hi - lo) * u);
  }
}
template <class T>
__global__ void from_float(const float* in, T* out, std::size_t n) {
  GRID_STRIDE(i, n) store(out, i, in[i]);
}
template <class T>
__global__ void to_float(const T* in, float* out, std::size_t n) {
  GRID_STRIDE(i, n) out[i] = load(in, i);
}

// A device buffer of one storage type.
struct Buffer {
  void* ptr = nullptr;
  std::size_t n = 0;
  Storage type = Storage::f32;
  Buffer(std::size_t elements, Storage t) : n(elements), type(t) {
    check(cudaMalloc(&ptr, std::max<std::size_t>(1, n) * storage_bytes(t)), "cudaMalloc");
  }
  ~Buffer() { cudaFree(ptr); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
  void randomize(unsigned seed, float lo, float hi) {
    dispatch(type, [&](auto tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      fill_random<T><<<blocks_for(n), kThreads>>>(as<T>(), n, seed, lo, hi);
    });
    check(cudaGetLastError(), "fill_random");
  }
  void upload(const std::vector<float>& host) {
    if (host.size() != n)
      throw CudaError("input has " + std::to_string(host.size()) + " values, the op needs " +
                      std::to_string(n));
    float* tmp = nullptr;
    check(cudaMalloc(&tmp, n * 4), "cudaMalloc");
    check(cudaMemcpy(tmp, host.data(), n * 4, cudaMemcpyHostToDevice), "upload");
    dispatch(type, [&](auto tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      from_float<T><<<blocks_for(n), kThreads>>>(tmp, as<T>(), n);
    });
    check(cudaDeviceSynchronize(), "convert");
    cudaFree(tmp);
  }
  std::vector<float> download() const {
    std::vector<float> host(n);
    float* tmp = nullptr;
    check(cudaMalloc(&tmp, n * 4), "cudaMalloc");
    dispatch(type, [&](auto tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      to_float<T><<<blocks_for(n), kThreads>>>(as<T>(), tmp, n);
    });
    check(cudaMemcpy(host.data(), tmp, n * 4, cudaMemcpyDeviceToHost), "download");
    cudaFree(tmp);
    return host;
  }
};

// ---- kernels -------------------------------------------------------------------------------

__device__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffU, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < int(blockDim.x + 31) / 32; ++w) total += partial[w];
  return total;
}
__device__ float block_max(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffU, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < int(blockDim.x + 31) / 32; ++w) m = fmaxf(m, partial[w]);
  return m;
}

template <class T>
__global__ void add_kernel(std::size_t n, const T* a, const T* b, T* y) {
  GRID_STRIDE(i, n) store(y, i, load(a, i) + load(b, i));
}

constexpr float kGeluC = 0.7978845608028654f;
template <class T>
__global__ void gelu_forward_kernel(std::size_t n, const T* x, T* y) {
  GRID_STRIDE(i, n) {
    const float v = load(x, i);
    store(y, i, 0.5f * v * (1.0f + tanhf(kGeluC * (v + 0.044715f * v * v * v))));
  }
}
template <class T>
__global__ void gelu_backward_kernel(std::size_t n, const T* x, const T* dy, T* dx) {
  GRID_STRIDE(i, n) {
    const float v = load(x, i);
    const float t = tanhf(kGeluC * (v + 0.044715f * v * v * v));
    const float du = kGeluC * (1.0f + 3.0f * 0.044715f * v * v);
    store(dx, i, load(dy, i) * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du));
  }
}
template <class T>
__global__ void swiglu_forward_kernel(std::size_t rows, std::size_t cols, const T* x, T* y) {
  GRID_STRIDE(i, rows * cols) {
    const std::size_t r = i / cols, c = i % cols;
    const float g = load(x, r * 2 * cols + c), u = load(x, r * 2 * cols + cols + c);
    store(y, i, g / (1.0f + expf(-g)) * u);
  }
}
template <class T>
__global__ void swiglu_backward_kernel(std::size_t rows, std::size_t cols, const T* x, const T* dy,
                                       T* dx) {
  GRID_STRIDE(i, rows * cols) {
    const std::size_t r = i / cols, c = i % cols;
    const float g = load(x, r * 2 * cols + c), u = load(x, r * 2 * cols + cols + c);
    const float sig = 1.0f / (1.0f + expf(-g)), d = load(dy, i);
    store(dx, r * 2 * cols + c, d * u * sig * (1.0f + g * (1.0f - sig)));
    store(dx, r * 2 * cols + cols + c, d * g * sig);
  }
}

// One block per row.
template <class T>
__global__ void layernorm_forward_kernel(int cols, const T* x, const T* g, const T* b, T* y,
                                         float* mean, float* rstd, bool rms) {
  const std::size_t row = blockIdx.x;
  const T* xr = x + row * cols;
  float s = 0, sq = 0;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = load(xr, c);
    s += v;
    sq += v * v;
  }
  const float mu = rms ? 0.0f : block_sum(s) / cols;
  const float ms = block_sum(sq) / cols;
  const float rs = rsqrtf((rms ? ms : ms - mu * mu) + 1e-5f);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = (load(xr, c) - mu) * rs * load(g, c) + (rms ? 0.0f : load(b, c));
    store(y, row * cols + c, v);
  }
  if (threadIdx.x == 0) {
    if (!rms) mean[row] = mu;
    rstd[row] = rs;
  }
}
template <class T>
__global__ void layernorm_backward_kernel(int cols, const T* x, const T* g, const float* mean,
                                          const float* rstd, const T* dy, T* dx, float* dg,
                                          float* db, bool rms) {
  const std::size_t row = blockIdx.x;
  const float mu = rms ? 0.0f : mean[row], rs = rstd[row];
  float s_dn = 0, s_dn_xhat = 0;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (load(x, row * cols + c) - mu) * rs;
    const float dn = load(dy, row * cols + c) * load(g, c);
    s_dn += dn;
    s_dn_xhat += dn * xhat;
  }
  const float mean_dn = rms ? 0.0f : block_sum(s_dn) / cols;
  const float mean_dn_xhat = block_sum(s_dn_xhat) / cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (load(x, row * cols + c) - mu) * rs;
    const float d = load(dy, row * cols + c);
    store(dx, row * cols + c, (d * load(g, c) - mean_dn - xhat * mean_dn_xhat) * rs);
    atomicAdd(dg + c, d * xhat);
    if (!rms) atomicAdd(db + c, d);
  }
}

template <class T>
__global__ void rope_kernel(std::size_t tokens, int seq, int heads, int dim, T* x, float sign) {
  const int half = dim / 2;
  GRID_STRIDE(i, tokens * heads * half) {
    const std::size_t t = i / (std::size_t(heads) * half);
    const int pair = int(i % half);
    const float angle = sign * float(t % seq) * powf(10000.0f, -2.0f * pair / dim);
    float s, c;
    sincosf(angle, &s, &c);
    const std::size_t at = (i / half) * dim + 2 * pair;
    const float a = load(x, at), b = load(x, at + 1);
    store(x, at, a * c - b * s);
    store(x, at + 1, a * s + b * c);
  }
}

// Causal softmax in place on scores [rows, seq]; row r is query position r % seq.
template <class T>
__global__ void causal_softmax_kernel(int seq, T* p) {
  const std::size_t row = blockIdx.x;
  const int visible = int(row % seq) + 1;
  T* pr = p + row * seq;
  float mx = -INFINITY;
  for (int c = threadIdx.x; c < visible; c += blockDim.x) mx = fmaxf(mx, load(pr, c));
  mx = block_max(mx);
  float s = 0;
  for (int c = threadIdx.x; c < visible; c += blockDim.x) s += expf(load(pr, c) - mx);
  s = block_sum(s);
  for (int c = threadIdx.x; c < seq; c += blockDim.x)
    store(pr, c, c < visible ? expf(load(pr, c) - mx) / s : 0.0f);
}
// dS = P * (dP - sum(P * dP)) * scale, in place on dP.
template <class T>
__global__ void softmax_backward_kernel(int seq, const T* p, T* dp, float scale) {
  const std::size_t row = blockIdx.x;
  float s = 0;
  for (int c = threadIdx.x; c < seq; c += blockDim.x)
    s += load(p, row * seq + c) * load(dp, row * seq + c);
  s = block_sum(s);
  for (int c = threadIdx.x; c < seq; c += blockDim.x) {
    const std::size_t at = row * seq + c;
    store(dp, at, load(p, at) * (load(dp, at) - s) * scale);
  }
}

__global__ void cross_entropy_kernel(int vocab, const float* logits, const float* targets,
                                     float* dlogits, int rows) {
  const std::size_t row = blockIdx.x;
  const float* lr = logits + row * vocab;
  float mx = -INFINITY;
  for (int c = threadIdx.x; c < vocab; c += blockDim.x) mx = fmaxf(mx, lr[c]);
  mx = block_max(mx);
  float s = 0;
  for (int c = threadIdx.x; c < vocab; c += blockDim.x) s += expf(lr[c] - mx);
  s = block_sum(s);
  const int target = int(targets[row]);
  for (int c = threadIdx.x; c < vocab; c += blockDim.x)
    dlogits[row * vocab + c] = (expf(lr[c] - mx) / s - (c == target ? 1.0f : 0.0f)) / rows;
}

__global__ void adam_kernel(std::size_t n, float* p, const float* g, float* m, float* v, float lr,
                            float b1, float b2, float eps, float wd, float c1, float c2) {
  GRID_STRIDE(i, n) {
    const float mi = b1 * m[i] + (1 - b1) * g[i];
    const float vi = b2 * v[i] + (1 - b2) * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
  }
}

// ---- cuBLASLt ------------------------------------------------------------------------------

cudaDataType_t cuda_type(Storage s) {
  switch (s) {
    case Storage::f32:
      return CUDA_R_32F;
    case Storage::f16:
      return CUDA_R_16F;
    case Storage::bf16:
      return CUDA_R_16BF;
    case Storage::f8:
      return CUDA_R_8F_E4M3;
  }
  return CUDA_R_32F;
}

struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = std::size_t(64) << 20;
  LtContext() {
    check(cublasLtCreate(&handle), "cublasLtCreate");
    check(cudaMalloc(&workspace, workspace_bytes), "cudaMalloc workspace");
  }
  ~LtContext() {
    cudaFree(workspace);
    cublasLtDestroy(handle);
  }
};
LtContext& lt() {
  static LtContext context;
  return context;
}

// Row-major C[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C, over `batch` strided matrices.
// cuBLASLt is column-major, so it computes C^T = op(B)^T op(A)^T. fp8 inputs: cuBLASLt needs
// the "TN" layout, which is used whatever the transposes asked (the profile times fp8 GEMMs
// of the same sizes; the data layout of a real fp8 layer is Transformer Engine's business).
class GemmPlan {
 public:
  GemmPlan(Storage in, Storage out, bool tf32, int m, int n, int k, bool trans_a, bool trans_b,
           int batch = 1, long long stride_a = 0, long long stride_b = 0, long long stride_c = 0)
      : alpha_(1.0f), beta_(0.0f) {
    const bool fp8 = in == Storage::f8;
    if (fp8) trans_a = false, trans_b = true;  // row-major A[m,k], B stored [n,k]: col-major TN
    const cublasComputeType_t compute =
        (in == Storage::f32 && tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    check(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F), "MatmulDescCreate");
    const cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // applies to B storage
    const cublasOperation_t op_second =
        trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // applies to A storage
    check(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_first,
                                         sizeof op_first),
          "TRANSA");
    check(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_second,
                                         sizeof op_second),
          "TRANSB");
    // First operand: B's storage. Row-major [k,n] = col-major [n,k] (ld n); transposed
    // storage [n,k] = col-major [k,n] (ld k).
    check(cublasLtMatrixLayoutCreate(&first_, cuda_type(in), trans_b ? k : n, trans_b ? n : k,
                                     trans_b ? k : n),
          "layout B");
    check(cublasLtMatrixLayoutCreate(&second_, cuda_type(in), trans_a ? m : k, trans_a ? k : m,
                                     trans_a ? m : k),
          "layout A");
    check(cublasLtMatrixLayoutCreate(&out_, cuda_type(out), n, m, n), "layout C");
    if (batch > 1) {
      set_batch(first_, batch, stride_b);
      set_batch(second_, batch, stride_a);
      set_batch(out_, batch, stride_c);
    }
    cublasLtMatmulPreference_t preference = nullptr;
    check(cublasLtMatmulPreferenceCreate(&preference), "PreferenceCreate");
    check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                               &lt().workspace_bytes, sizeof lt().workspace_bytes),
          "workspace");
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        lt().handle, desc_, first_, second_, out_, out_, preference, 1, &heuristic_, &found);
    cublasLtMatmulPreferenceDestroy(preference);
    check(status, "AlgoGetHeuristic");
    if (found == 0) throw CudaError("cuBLASLt has no algorithm for this GEMM");
  }
  ~GemmPlan() {
    cublasLtMatrixLayoutDestroy(first_);
    cublasLtMatrixLayoutDestroy(second_);
    cublasLtMatrixLayoutDestroy(out_);
    cublasLtMatmulDescDestroy(desc_);
  }
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  void set_scale(float alpha, float beta) { alpha_ = alpha, beta_ = beta; }
  void run(const void* a, const void* b, void* c) const {
    check(cublasLtMatmul(lt().handle, desc_, &alpha_, b, first_, a, second_, &beta_, c, out_, c,
                         out_, &heuristic_.algo, lt().workspace, lt().workspace_bytes, nullptr),
          "cublasLtMatmul");
  }

 private:
  static void set_batch(cublasLtMatrixLayout_t layout, int batch, long long stride) {
    check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                           sizeof batch),
          "batch");
    check(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                           &stride, sizeof stride),
          "stride");
  }
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t first_ = nullptr, second_ = nullptr, out_ = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic_{};
  float alpha_, beta_;
};

// ---- one op on its buffers -----------------------------------------------------------------

struct OpInstance {
  std::vector<std::unique_ptr<Buffer>> buffers;
  std::vector<int> inputs, outputs;
  std::vector<std::unique_ptr<GemmPlan>> plans;
  std::function<void()> run;

  Buffer& add(std::size_t n, Storage t, bool input, bool output = false) {
    buffers.push_back(std::make_unique<Buffer>(n, t));
    if (input) inputs.push_back(int(buffers.size()) - 1);
    if (output) outputs.push_back(int(buffers.size()) - 1);
    return *buffers.back();
  }
  GemmPlan& plan(std::unique_ptr<GemmPlan> p) {
    plans.push_back(std::move(p));
    return *plans.back();
  }
};

std::unique_ptr<OpInstance> make_instance(const std::string& op, const std::vector<long long>& s,
                                          const std::string& dtype) {
  auto inst = std::make_unique<OpInstance>();
  OpInstance& I = *inst;
  const Storage t = storage_for(dtype, is_gemm(op));
  const bool tf32 = dtype == "tf32";
  const Storage f32 = Storage::f32;
  auto need = [&](std::size_t rank) {
    if (s.size() != rank)
      throw CudaError("op " + op + " takes " + std::to_string(rank) + " dimensions");
  };
  if (is_gemm(op)) {
    need(3);
    const int m = int(s[0]), n = int(s[1]), k = int(s[2]);
    const Storage out = t == Storage::f8 ? Storage::bf16 : t;
    int M = m, N = n, K = k;
    bool ta = false, tb = false;
    if (op == "gemm_dgrad") N = k, K = n, tb = true;
    if (op == "gemm_wgrad") M = k, K = m, ta = true;
    Buffer& a = I.add(std::size_t(M) * K, t, true);
    Buffer& b = I.add(std::size_t(K) * N, t, true);
    Buffer& c = I.add(std::size_t(M) * N, out, false, true);
    GemmPlan& p = I.plan(std::make_unique<GemmPlan>(t, out, tf32, M, N, K, ta, tb));
    I.run = [&p, &a, &b, &c] { p.run(a.ptr, b.ptr, c.ptr); };
    return inst;
  }
  if (op == "attention" || op == "attention_backward") {
    need(5);
    const int b = int(s[0]), h = int(s[1]), kvh = int(s[2]), seq = int(s[3]), d = int(s[4]);
    const int g = h / kvh, batch = b * kvh;
    const std::size_t q_n = std::size_t(b) * h * seq * d, kv_n = std::size_t(b) * kvh * seq * d,
                      p_n = std::size_t(b) * h * seq * seq;
    const float scale = 1.0f / std::sqrt(float(d));
    const long long gs = (long long)g * seq;
    Buffer& q = I.add(q_n, t, true);
    Buffer& k = I.add(kv_n, t, true);
    Buffer& v = I.add(kv_n, t, true);
    const unsigned rows = unsigned(std::size_t(b) * h * seq);
    if (op == "attention") {
      Buffer& p = I.add(p_n, t, false, true);
      Buffer& o = I.add(q_n, t, false, true);
      GemmPlan& qk = I.plan(std::make_unique<GemmPlan>(
          t, t, false, int(gs), seq, d, false, true, batch, gs * d, (long long)seq * d, gs * seq));
      qk.set_scale(scale, 0.0f);
      GemmPlan& pv = I.plan(std::make_unique<GemmPlan>(
          t, t, false, int(gs), d, seq, false, false, batch, gs * seq, (long long)seq * d, gs * d));
      I.run = [&, rows, seq] {
        qk.run(q.ptr, k.ptr, p.ptr);
        dispatch(t, [&](auto tag) {
          using T = std::remove_pointer_t<decltype(tag)>;
          causal_softmax_kernel<T><<<rows, kThreads>>>(seq, p.as<T>());
        });
        pv.run(p.ptr, v.ptr, o.ptr);
      };
      return inst;
    }
    Buffer& p = I.add(p_n, t, true);
    Buffer& d_o = I.add(q_n, t, true);
    Buffer& dq = I.add(q_n, t, false, true);
    Buffer& dk = I.add(kv_n, t, false, true);
    Buffer& dv = I.add(kv_n, t, false, true);
    Buffer& dp = I.add(p_n, t, false);
    GemmPlan& pt_do = I.plan(std::make_unique<GemmPlan>(
        t, t, false, seq, d, int(gs), true, false, batch, gs * seq, gs * d, (long long)seq * d));
    GemmPlan& do_vt = I.plan(std::make_unique<GemmPlan>(
        t, t, false, int(gs), seq, d, false, true, batch, gs * d, (long long)seq * d, gs * seq));
    GemmPlan& ds_k = I.plan(std::make_unique<GemmPlan>(
        t, t, false, int(gs), d, seq, false, false, batch, gs * seq, (long long)seq * d, gs * d));
    GemmPlan& dst_q = I.plan(std::make_unique<GemmPlan>(
        t, t, false, seq, d, int(gs), true, false, batch, gs * seq, gs * d, (long long)seq * d));
    I.run = [&, rows, seq, scale] {
      pt_do.run(p.ptr, d_o.ptr, dv.ptr);
      do_vt.run(d_o.ptr, v.ptr, dp.ptr);
      dispatch(t, [&](auto tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        softmax_backward_kernel<T><<<rows, kThreads>>>(seq, p.as<T>(), dp.as<T>(), scale);
      });
      ds_k.run(dp.ptr, k.ptr, dq.ptr);
      dst_q.run(dp.ptr, q.ptr, dk.ptr);
    };
    return inst;
  }
  if (op == "layernorm" || op == "rmsnorm") {
    need(2);
    const bool rms = op == "rmsnorm";
    const int rows = int(s[0]), cols = int(s[1]);
    Buffer& x = I.add(std::size_t(rows) * cols, t, true);
    Buffer& g = I.add(cols, t, true);
    Buffer& bt = rms ? g : I.add(cols, t, true);
    Buffer& y = I.add(std::size_t(rows) * cols, t, false, true);
    Buffer& mean = rms ? y : I.add(rows, f32, false, true);
    Buffer& rstd = I.add(rows, f32, false, true);
    I.run = [&, rows, cols, rms] {
      dispatch(t, [&](auto tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        layernorm_forward_kernel<T><<<rows, kThreads>>>(cols, x.as<T>(), g.as<T>(), bt.as<T>(),
                                                        y.as<T>(), rms ? nullptr : mean.as<float>(),
                                                        rstd.as<float>(), rms);
      });
    };
    return inst;
  }
  if (op == "layernorm_backward" || op == "rmsnorm_backward") {
    need(2);
    const bool rms = op == "rmsnorm_backward";
    const int rows = int(s[0]), cols = int(s[1]);
    Buffer& x = I.add(std::size_t(rows) * cols, t, true);
    Buffer& g = I.add(cols, t, true);
    Buffer& mean = rms ? g : I.add(rows, f32, true);
    Buffer& rstd = I.add(rows, f32, true);
    Buffer& dy = I.add(std::size_t(rows) * cols, t, true);
    Buffer& dx = I.add(std::size_t(rows) * cols, t, false, true);
    Buffer& dg = I.add(cols, f32, false, true);
    Buffer& db = rms ? dg : I.add(cols, f32, false, true);
    I.run = [&, rows, cols, rms] {
      check(cudaMemsetAsync(dg.ptr, 0, cols * 4), "memset");
      if (!rms) check(cudaMemsetAsync(db.ptr, 0, cols * 4), "memset");
      dispatch(t, [&](auto tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        layernorm_backward_kernel<T><<<rows, kThreads>>>(
            cols, x.as<T>(), g.as<T>(), rms ? nullptr : mean.as<float>(), rstd.as<float>(),
            dy.as<T>(), dx.as<T>(), dg.as<float>(), rms ? nullptr : db.as<float>(), rms);
      });
    };
    return inst;
  }
  if (op == "gelu" || op == "gelu_backward" || op == "add") {
    need(1);
    const std::size_t n = std::size_t(s[0]);
    Buffer& x = I.add(n, t, true);
    Buffer& y = op == "gelu" ? I.add(n, t, false, true) : I.add(n, t, true);
    Buffer& z = op == "gelu" ? y : I.add(n, t, false, true);
    I.run = [&, n, op] {
      dispatch(t, [&](auto tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        if (op == "gelu")
          gelu_forward_kernel<T><<<blocks_for(n), kThreads>>>(n, x.as<T>(), y.as<T>());
        else if (op == "add")
          add_kernel<T><<<blocks_for(n), kThreads>>>(n, x.as<T>(), y.as<T>(), z.as<T>());
        else
          gelu_backward_kernel<T><<<blocks_for(n), kThreads>>>(n, x.as<T>(), y.as<T>(), z.as<T>());
      });
    };
    return inst;
  }
  if (op == "swiglu" || op == "swiglu_backward") {
    need(2);
    const std::size_t rows = std::size_t(s[0]), cols = std::size_t(s[1]);
    Buffer& x = I.add(2 * rows * cols, t, true);
    const bool fwd = op == "swiglu";
    Buffer& y = fwd ? I.add(rows * cols, t, false, true) : I.add(rows * cols, t, true);
    Buffer& dx = fwd ? y : I.add(2 * rows * cols, t, false, true);
    I.run = [&, rows, cols, fwd] {
      dispatch(t, [&](auto tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        if (fwd)
          swiglu_forward_kernel<T>
              <<<blocks_for(rows * cols), kThreads>>>(rows, cols, x.as<T>(), y.as<T>());
        else
          swiglu_backward_kernel<T>
              <<<blocks_for(rows * cols), kThreads>>>(rows, cols, x.as<T>(), y.as<T>(), dx.as<T>());
      });
    };
    return inst;
  }
  if (op == "rope") {
    need(4);
    const std::size_t tokens = std::size_t(s[0]);
    const int heads = int(s[1]), dim = int(s[2]), seq = int(s[3]);
    Buffer& x = I.add(tokens * heads * dim, t, true, true);
    I.run = [&, tokens, heads, dim, seq] {
      dispatch(t, [&](auto tag) {
        using T = std::remove_pointer_t<decltype(tag)>;
        rope_kernel<T><<<blocks_for(tokens * heads * dim / 2), kThreads>>>(tokens, seq, heads, dim,
                                                                           x.as<T>(), 1.0f);
      });
    };
    return inst;
  }
  if (op == "cross_entropy") {
    need(2);
    const int rows = int(s[0]), vocab = int(s[1]);
    Buffer& logits = I.add(std::size_t(rows) * vocab, f32, true);
    Buffer& targets = I.add(rows, f32, true);
    Buffer& dlogits = I.add(std::size_t(rows) * vocab, f32, false, true);
    I.run = [&, rows, vocab] {
      cross_entropy_kernel<<<rows, kThreads>>>(vocab, logits.as<float>(), targets.as<float>(),
                                               dlogits.as<float>(), rows);
    };
    return inst;
  }
  if (op == "adam") {
    need(1);
    const std::size_t n = std::size_t(s[0]);
    Buffer& p = I.add(n, f32, true, true);
    Buffer& g = I.add(n, f32, true);
    Buffer& m = I.add(n, f32, true, true);
    Buffer& v = I.add(n, f32, true, true);
    I.run = [&, n] {
      // AdamSettings' defaults at step 1 (kernels/ops_cpu.hpp).
      adam_kernel<<<blocks_for(n), kThreads>>>(n, p.as<float>(), g.as<float>(), m.as<float>(),
                                               v.as<float>(), 1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f,
                                               1 - 0.9f, 1 - 0.95f);
    };
    return inst;
  }
  throw CudaError("no CUDA op '" + op + "'");
}

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const auto lo = std::size_t(std::floor(pos)), hi = std::size_t(std::ceil(pos));
  return v[lo] + (pos - double(lo)) * (v[hi] - v[lo]);
}

CudaTiming time_callable(const std::function<void()>& call, double seconds_per_entry) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  auto elapsed = [&](int calls) {
    check(cudaEventRecord(start), "record");
    for (int i = 0; i < calls; ++i) call();
    check(cudaEventRecord(stop), "record");
    check(cudaEventSynchronize(stop), "synchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    return ms * 1e-3;
  };
  elapsed(1);  // warm-up (and cuBLASLt's first-call set-up)
  const double once = std::max(elapsed(1), 1e-7);
  const int per_sample = std::max(1, int(std::ceil(2e-4 / once)));
  const int repeats = std::clamp(int(seconds_per_entry / (once * per_sample)), 5, 25);
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) samples.push_back(elapsed(per_sample) / per_sample);
  check(cudaGetLastError(), "kernel launch");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return {percentile(samples, 0.5), percentile(samples, 0.1), percentile(samples, 0.9), repeats};
}

std::vector<long long> to_dims(const std::vector<double>& shape) {
  std::vector<long long> out;
  for (double x : shape) out.push_back((long long)std::llround(x));
  return out;
}

template <class F>
bool guarded(std::string* error, F&& f) {
  try {
    f();
    return true;
  } catch (const std::exception& e) {
    if (error) *error = e.what();
    cudaGetLastError();  // clear a sticky launch error where possible
    return false;
  }
}

}  // namespace

bool cuda_device_info(CudaDeviceInfo* out, std::string* error) {
  return guarded(error, [&] {
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    out->name = prop.name;
    out->compute_capability_major = prop.major;
    out->compute_capability_minor = prop.minor;
    check(cudaDriverGetVersion(&out->driver_version), "cudaDriverGetVersion");
    check(cudaRuntimeGetVersion(&out->runtime_version), "cudaRuntimeGetVersion");
    out->cublaslt_version = long(cublasLtGetVersion());
    int khz = 0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device) == cudaSuccess)
      out->sm_clock_mhz = khz / 1000.0;
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess)
      out->memory_clock_mhz = khz / 1000.0;
    cudaGetLastError();
  });
}

bool cuda_time_op(const std::string& op, const std::vector<double>& shape, const std::string& dtype,
                  double seconds_per_entry, CudaTiming* out, std::string* error) {
  return guarded(error, [&] {
    auto inst = make_instance(op, to_dims(shape), dtype);
    unsigned seed = 1;
    for (int i : inst->inputs) inst->buffers[i]->randomize(seed++, -1.0f, 1.0f);
    if (op == "attention_backward" || op == "layernorm_backward" || op == "rmsnorm_backward")
      for (int i : inst->inputs) inst->buffers[i]->randomize(seed++, 0.0f, 1.0f);  // valid p, rstd
    if (op == "cross_entropy") inst->buffers[1]->randomize(seed++, 0.0f, 0.0f);
    check(cudaDeviceSynchronize(), "set-up");
    *out = time_callable(inst->run, seconds_per_entry);
  });
}

bool cuda_run_op(const std::string& op, const std::vector<int>& shape, const std::string& dtype,
                 const std::vector<std::vector<float>>& inputs,
                 std::vector<std::vector<float>>* outputs, std::string* error) {
  return guarded(error, [&] {
    std::vector<long long> dims(shape.begin(), shape.end());
    auto inst = make_instance(op, dims, dtype);
    if (inputs.size() != inst->inputs.size())
      throw CudaError(op + " takes " + std::to_string(inst->inputs.size()) + " inputs");
    for (std::size_t i = 0; i < inputs.size(); ++i)
      inst->buffers[inst->inputs[i]]->upload(inputs[i]);
    inst->run();
    check(cudaDeviceSynchronize(), op.c_str());
    outputs->clear();
    for (int i : inst->outputs) outputs->push_back(inst->buffers[i]->download());
  });
}

bool cuda_measure_peaks(std::map<std::string, double>* peaks, double* copy_bandwidth,
                        std::string* error) {
  return guarded(error, [&] {
    CudaDeviceInfo info;
    std::string ignored;
    cuda_device_info(&info, &ignored);
    const int cc = info.compute_capability_major * 10 + info.compute_capability_minor;
    for (const char* dtype : {"fp32", "tf32", "fp16", "bf16", "fp8"}) {
      if (std::string(dtype) == "fp8" && cc < 89) continue;
      const double n = 8192;
      CudaTiming t;
      std::string why;
      if (!cuda_time_op("gemm", {n, n, n}, dtype, 0.3, &t, &why)) continue;
      (*peaks)[dtype] = 2 * n * n * n / t.p10_s;  // the best samples: the matrix peak
    }
    const std::size_t bytes = std::size_t(1) << 30;
    Buffer src(bytes, Storage::f8), dst(bytes, Storage::f8);
    const CudaTiming copy = time_callable(
        [&] { check(cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice), "copy"); },
        0.3);
    *copy_bandwidth = 2.0 * double(bytes) / copy.p10_s;
  });
}

}  // namespace hgsim::kernels::gpu

// The table the main library calls through (core/cuda_module.hpp).
extern "C" __attribute__((visibility("default"))) const hgsim::kernels::gpu::OpsCudaTable*
hgsim_ops_cuda_table() {
  namespace gpu = hgsim::kernels::gpu;
  static const gpu::OpsCudaTable table = [] {
    gpu::OpsCudaTable t;
    t.device_info = &gpu::cuda_device_info;
    t.time_op = &gpu::cuda_time_op;
    t.run_op = &gpu::cuda_run_op;
    t.measure_peaks = &gpu::cuda_measure_peaks;
    return t;
  }();
  return &table;
}
