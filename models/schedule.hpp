// The pipeline schedules as Megatron-LM runs them: the order of one stage's forward and
// backward passes. This module owns the schedule: the simulator's workload plays it
// (sim/workload.cpp), the memory model counts its peak of micro-batches in flight
// (models/transformer.cpp) and the live runner plays it through _hgsim.schedule.
#pragma once

#include <vector>

#include "core/scenario.hpp"

namespace hgsim::models {

struct PipeOp {
  bool forward = true;
  int micro_batch = 0;
  int chunk = 0;  // model chunk (interleaved); 0 otherwise
  bool operator==(const PipeOp&) const = default;
};

// All forwards, then all backwards.
std::vector<PipeOp> gpipe(int micro_batches);
// Warm-up forwards (p - stage - 1), steady one-forward-one-backward, cool-down backwards.
std::vector<PipeOp> one_f_one_b(int stages, int stage, int micro_batches);
// Megatron-LM's interleaved 1F1B over `chunks` model chunks per stage.
std::vector<PipeOp> interleaved(int stages, int stage, int micro_batches, int chunks);
std::vector<PipeOp> schedule_for(core::Schedule schedule, int stages, int stage, int micro_batches,
                                 int chunks);

// The forward passes stage `stage` runs before its first backward (in (micro-batch, chunk)
// pairs): the one rule every schedule above and the peak below are built from.
int warmup_forwards(core::Schedule schedule, int stages, int stage, int micro_batches, int chunks);

// The most (micro-batch, chunk) pairs whose activations the stage holds at once when it
// runs schedule_for(...): its warm-up plus the first steady forward, or every pass when the
// warm-up takes them all.
int peak_in_flight(core::Schedule schedule, int stages, int stage, int micro_batches, int chunks);

// The same peak counted on an op order: forwards run minus backwards run, at its highest.
int peak_in_flight(const std::vector<PipeOp>& ops);

}  // namespace hgsim::models
