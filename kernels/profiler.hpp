// The CPU profiler: times the ops of kernels/layer_ops.hpp on this machine's CPU (one core,
// Eigen single-threaded), measures the CPU's matrix peak and copy bandwidth, and runs whole
// layers to check that the sum of op times predicts a layer (check-layers).
//
// Timing: each op gets fresh random inputs, one warm-up call (more while under 20 ms), then
// `repeats` timed samples; a sample times enough back-to-back calls to last at least 1 ms
// and is divided by their number. Repeats are chosen per op from its warm-up time so that
// an op costs about `seconds_per_entry` (at least 5, at most 25 samples). The entry keeps
// the median and the 10th and 90th percentiles of the samples. Times are the thread's CPU
// time (CLOCK_THREAD_CPUTIME_ID), not wall time: the build machines share their cores with
// other jobs, and the slices the scheduler gives them are not the op's cost. (Cache and
// memory-bandwidth contention from those jobs still shows; the profile records the load.)
//
// The zoo is scaled down to what one core runs in seconds (scale_for_cpu): hidden 256,
// heads the power of two nearest heads x 256 / hidden (at least 2, keeping the grouped-
// query ratio where possible), ffn_hidden and vocab scaled by the same factor (vocab by 8
// times more, rounded to 64), everything else (activation, norm, rotary or learned
// positions) as in the zoo. Shapes from models x micro-batches x tp are deduplicated.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/scenario.hpp"
#include "kernels/layer_ops.hpp"
#include "kernels/profile.hpp"

namespace hgsim::kernels {

struct TimingSamples {
  double median_s = 0, p10_s = 0, p90_s = 0;
  int repeats = 0;
};

// Times `call` as described above.
TimingSamples time_function(const std::function<void()>& call, double seconds_per_entry);

// The zoo model at CPU size (see the file comment); its name gets the suffix "/cpu".
core::ModelConfig scale_for_cpu(const core::ModelConfig& m, int hidden = 256);

struct CpuSweep {
  std::vector<std::string> models;  // zoo names; empty: the whole zoo
  std::vector<int> micro_batches{1, 2, 4};
  std::vector<int> tp{1, 2};
  int seq_len = 128;  // 0: the model's own (GPU sweeps): 1024 for learned positions, else 2048
  int hidden = 256;   // scale_for_cpu's hidden size; 0: the zoo's shapes unscaled (GPU sweeps)
  core::Precision precision = core::Precision::fp32;
  double seconds_per_entry = 0.15;
  std::function<void(const std::string&)> progress;  // one line per stage; may be empty
};

// The deduplicated op calls of a sweep, in a stable order.
std::vector<OpCall> sweep_ops(const CpuSweep& sweep);

// The GPU sweep: the zoo unscaled (hidden 0, seq_len 0), `precision` for every op, plus
// the forward GEMMs in each of `extra_gemm_dtypes`; stops after `max_seconds` (the profile
// then says "truncated" in its conditions). Fails with the reason when there is no device.
struct CudaSweep {
  CpuSweep ops;
  std::vector<std::string> extra_gemm_dtypes;
  double max_seconds = 220;
};
Profile profile_cuda(const CudaSweep& sweep,
                     const std::map<std::string, std::string>& conditions = {});

// Measures the sweep and the CPU's peaks; `conditions` go to device.conditions as given.
Profile profile_cpu(const CpuSweep& sweep,
                    const std::map<std::string, std::string>& conditions = {});

// The name profile_cpu gives this machine's CPU (device.name): its /proc/cpuinfo model name
// and "(1 core)".
std::string cpu_device_name();

// The measured matrix peak of one core (FLOP/s, mul+add on the build's vector width, all in
// registers) and copy bandwidth (bytes read + written per second, memcpy of 64 MiB).
double measure_cpu_matrix_peak();
double measure_cpu_copy_bandwidth();

// A whole layer executed on the CPU with the fast ops, in the order of layer_ops.
struct LayerCheck {
  std::string model;
  int micro_batch = 1;
  int tp = 1;
  std::string phase;  // "forward" or "backward"
  double predicted_s = 0;
  double measured_s = 0;
  double error() const { return (predicted_s - measured_s) / measured_s; }
};

// Measures forward and backward of every (model, micro-batch, tp) with the ops running
// back to back on shared buffers (the real data flow), and predicts them with `model` on
// `device` (the profiled CPU) at fp32.
std::vector<LayerCheck> check_layers_cpu(const ComputeModel& model, const GpuSpec& device,
                                         const std::vector<core::ModelConfig>& models,
                                         const std::vector<int>& micro_batches,
                                         const std::vector<int>& tp, int seq_len,
                                         double seconds_per_entry,
                                         const std::function<void(const std::string&)>& progress);

// Runs one op on the CPU with its own random buffers (what the sweep times); returns a
// callable that runs it once.
std::function<void()> cpu_op_runner(const OpCall& call, unsigned seed);

}  // namespace hgsim::kernels
