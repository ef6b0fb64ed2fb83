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
  std::vector<int> micro_batches{1, 2, 4};
  std::vector<int> tp{1, 2};
  int seq_len = 128;
  std::string out;
  bool check_layers = false;
  std::string profile;  // --check-layers: an existing profile instead of measuring one
  bool json = false;
  double seconds_per_entry = 0.15;
};

// Adds the subcommand to `app`, its options bound to `options`.
CLI::App* add_profile_command(CLI::App& app, ProfileOptions& options);
int run_profile_command(const ProfileOptions& options, std::ostream& out, std::ostream& err);

}  // namespace hgsim::apps
