#include "models/schedule.hpp"

#include <algorithm>

namespace hgsim::models {

int warmup_forwards(core::Schedule schedule, int stages, int stage, int micro_batches, int chunks) {
  const int p = stages;
  const int m = micro_batches;
  switch (schedule) {
    case core::Schedule::gpipe:
      return m;
    case core::Schedule::one_f_one_b:
      // PipeDream-Flush (Narayanan et al. 2021, sec. 2.2.1): stage r warms up with p - r - 1.
      return std::clamp(p - stage - 1, 0, m);
    case core::Schedule::interleaved: {
      // Megatron-LM (schedules.py, forward_backward_pipelining_with_interleaving): warm-up
      // (p - r - 1) 2 + (v - 1) p chunk forwards; with m = p every forward is a warm-up one
      // ("all_warmup_microbatches").
      const int v = std::max(chunks, 1);
      const int total = m * v;
      if (m == p) return total;
      return std::clamp((p - stage - 1) * 2 + (v - 1) * p, 0, total);
    }
  }
  return m;
}

int peak_in_flight(core::Schedule schedule, int stages, int stage, int micro_batches, int chunks) {
  const int total =
      micro_batches * (schedule == core::Schedule::interleaved ? std::max(chunks, 1) : 1);
  return std::min(warmup_forwards(schedule, stages, stage, micro_batches, chunks) + 1, total);
}

int peak_in_flight(const std::vector<PipeOp>& ops) {
  int held = 0;
  int peak = 0;
  for (const PipeOp& op : ops) {
    held += op.forward ? 1 : -1;
    peak = std::max(peak, held);
  }
  return peak;
}

std::vector<PipeOp> gpipe(int micro_batches) {
  std::vector<PipeOp> ops;
  for (int mb = 0; mb < micro_batches; ++mb) ops.push_back({true, mb, 0});
  for (int mb = 0; mb < micro_batches; ++mb) ops.push_back({false, mb, 0});
  return ops;
}

std::vector<PipeOp> one_f_one_b(int stages, int stage, int micro_batches) {
  const int warmup = warmup_forwards(core::Schedule::one_f_one_b, stages, stage, micro_batches, 1);
  const int steady = micro_batches - warmup;
  std::vector<PipeOp> ops;
  for (int mb = 0; mb < warmup; ++mb) ops.push_back({true, mb, 0});
  for (int i = 0; i < steady; ++i) {
    ops.push_back({true, warmup + i, 0});
    ops.push_back({false, i, 0});
  }
  for (int i = steady; i < micro_batches; ++i) ops.push_back({false, i, 0});
  return ops;
}

std::vector<PipeOp> interleaved(int stages, int stage, int micro_batches, int chunks) {
  // The k-th forward runs chunk (k / p) mod v of micro-batch (k / (p v)) p + k mod p;
  // backwards walk the chunks in reverse.
  const int p = stages;
  const int total = micro_batches * chunks;
  auto micro_batch = [&](int k) { return (k / (p * chunks)) * p + k % p; };
  auto forward = [&](int k) { return PipeOp{true, micro_batch(k), (k % (p * chunks)) / p}; };
  auto backward = [&](int k) {
    return PipeOp{false, micro_batch(k), chunks - 1 - (k % (p * chunks)) / p};
  };
  const int warmup =
      warmup_forwards(core::Schedule::interleaved, stages, stage, micro_batches, chunks);
  const int steady = total - warmup;
  std::vector<PipeOp> ops;
  for (int k = 0; k < warmup; ++k) ops.push_back(forward(k));
  for (int i = 0; i < steady; ++i) {
    ops.push_back(forward(warmup + i));
    ops.push_back(backward(i));
  }
  for (int i = steady; i < total; ++i) ops.push_back(backward(i));
  return ops;
}

std::vector<PipeOp> schedule_for(core::Schedule schedule, int stages, int stage, int micro_batches,
                                 int chunks) {
  switch (schedule) {
    case core::Schedule::gpipe:
      return gpipe(micro_batches);
    case core::Schedule::one_f_one_b:
      return one_f_one_b(stages, stage, micro_batches);
    case core::Schedule::interleaved:
      return interleaved(stages, stage, micro_batches, chunks);
  }
  return {};
}

}  // namespace hgsim::models
