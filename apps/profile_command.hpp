// `hgsim profile`: measures op profiles (kernels/profiler.hpp) and checks that the sum of
// op times predicts whole layers (--check-layers).
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace hgsim::apps {

struct ProfileOptions {
  std::string device = "cpu";
  std::vector<std::string> models;  // zoo names; empty: the whole zoo (cpu) / defaults
  // Empty or 0: the device's default (cpu: tp 1,2, seq_len 128, 0.15 s per shape; cuda:
  // tp 1,2,4,8, each model's own seq_len (1024 learned positions, else 2048), 0.02 s).
  std::vector<int> micro_batches{1, 2, 4};
  std::vector<int> tp;
  int seq_len = 0;
  // cuda only (empty or 0: bf16; fp32 tf32 fp16 fp8; 220 s); refused on the cpu.
  std::string dtype;                     // every op
  std::vector<std::string> gemm_dtypes;  // more dtypes for the forward GEMMs
  double max_seconds = 0;                // the sweep's budget
  std::string out;
  bool check_layers = false;
  std::string profile;  // --check-layers: an existing profile instead of measuring one
  bool json = false;
  double seconds_per_entry = 0;
};

// Adds the subcommand to `app`, its options bound to `options`.
CLI::App* add_profile_command(CLI::App& app, ProfileOptions& options);
int run_profile_command(const ProfileOptions& options, std::ostream& out, std::ostream& err);

}  // namespace hgsim::apps
