// hgsim: plan and simulate training of large models on heterogeneous GPU clusters.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "apps/commands.hpp"
#include "core/process.hpp"

#ifdef HGSIM_HAVE_MPI
namespace hgsim::apps {
void register_mpi_sweeps();  // apps/sweep_mpi.cpp
}
#endif

int main(int argc, char** argv) {
  // Ctrl-C or a kill ends the simulator child too, and removes half-written files.
  hgsim::core::install_termination_handlers();
  // Before anything recurses: a stack too small to read a large scenario is said, not a
  // SIGSEGV later.
  if (const auto why = hgsim::core::stack_refusal()) {
    std::cerr << "hgsim: " << *why << "\n";
    return hgsim::apps::kBadInput;
  }
#ifdef HGSIM_HAVE_MPI
  hgsim::apps::register_mpi_sweeps();  // hgsim sweep --mpi
#endif
  const int status = hgsim::apps::run_cli(argc, argv, std::cout, std::cerr);
  // Output that could not be written (a full disk, /dev/full, a closed pipe) is a failure,
  // not a silent success.
  errno = 0;
  std::cout.flush();
  const bool written = std::cout.good() && std::fflush(stdout) == 0 && !std::ferror(stdout);
  if (!written) {
    std::cerr << "hgsim: cannot write the output: "
              << (errno != 0 ? std::strerror(errno) : "the write failed") << "\n";
    return status == hgsim::apps::kSuccess ? hgsim::apps::kBadInput : status;
  }
  return status;
}
