// hgsim: plan and simulate training of large models on heterogeneous GPU clusters.
#include <iostream>

#include "apps/commands.hpp"

#ifdef HGSIM_HAVE_MPI
namespace hgsim::apps {
void register_mpi_sweeps();  // apps/sweep_mpi.cpp
}
#endif

int main(int argc, char** argv) {
#ifdef HGSIM_HAVE_MPI
  hgsim::apps::register_mpi_sweeps();  // hgsim sweep --mpi
#endif
  return hgsim::apps::run_cli(argc, argv, std::cout, std::cerr);
}
