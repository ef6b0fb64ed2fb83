// hgsim: plan and simulate training of large models on heterogeneous GPU clusters.
#include <iostream>

#include "apps/commands.hpp"

int main(int argc, char** argv) {
  return hgsim::apps::run_cli(argc, argv, std::cout, std::cerr);
}
