// `hgsim codecs [--bench] [--json] [--size N]`: every codec on random data of N elements —
// its size against fp32, its relative L2 error and, with --bench, its encode and decode
// throughput on this CPU beside a memcpy of the same buffer measured in the same run.
#pragma once

#include <cstdint>
#include <iosfwd>

#include <CLI/CLI.hpp>

namespace hgsim::apps {

struct CodecsOptions {
  bool bench = false;
  bool json = false;
  std::int64_t size = std::int64_t(1) << 24;  // 16.8M elements, 64 MiB of fp32
};

// Adds the subcommand to `app`; the options land in `options` when it is parsed.
CLI::App* add_codecs_command(CLI::App& app, CodecsOptions& options);

int run_codecs_command(const CodecsOptions& options, std::ostream& out, std::ostream& err);

}  // namespace hgsim::apps
