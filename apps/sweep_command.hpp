// `hgsim sweep`: every point of a scenario's sweep grid, N at a time, each in a process of
// its own, its result written to the sweep database (apps/results_db.hpp) as it finishes.
// A failed point is recorded with its error and the others go on; --resume skips the points
// already `ok` for the same resolved scenario; --mpi hands the points to the ranks of an
// MPI job (apps/sweep_mpi.cpp). Killing the command (any signal) leaves no simulator
// process behind: every point's process, and the simulator it starts, die with it.
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/run_point.hpp"

namespace CLI {
class App;
}

namespace hgsim::apps {

struct SweepOptions {
  std::string scenario;
  RunOptions run;  // --plan, --layer-profile, --time-budget: the same at every point
  int jobs = 0;    // -j; 0: the cores
  std::string db;  // --db; empty: <scenario without extension>.sweep.sqlite beside it
  bool resume = false;
  bool mpi = false;
  std::optional<long long> point;  // --point K
  bool json = false;
  bool list_only = false;
};

CLI::App* add_sweep_command(CLI::App& app, SweepOptions& options);
int run_sweep_command(const SweepOptions& options, std::ostream& out, std::ostream& err);

// The sweep database a scenario's sweep writes by default: beside it, as
// <name>.sweep.sqlite (`scenarios/x.yaml` -> `scenarios/x.sweep.sqlite`).
std::string default_sweep_db(const std::string& scenario_path);

// ---- what the MPI runner shares with the local one ---------------------------------------

// What every process of a sweep knows: the points and how each runs.
struct SweepJob {
  const SweepPoints* points = nullptr;
  RunOptions run;
};
// Runs point k in the calling process and returns its outcome as JSON text:
// {"ok": true, "result": {...}, "plan": {...}} or {"ok": false, "error": "..."}.
std::string run_point_here(const SweepJob& job, long long k);
// The same in a process of its own (forked, dying with this one), waiting for it.
std::string run_point_in_child(const SweepJob& job, long long k);

// A finished point: its index, its outcome (run_point_here's JSON text) and its wall time.
using PointDone = std::function<void(long long k, const std::string& outcome, double wall_s)>;

// An MPI job (apps/sweep_mpi.cpp, when hgsim is built with MPI): rank 0 owns the database
// and hands out the points; the other ranks run them.
class MpiSession {
 public:
  virtual ~MpiSession() = default;  // tells the ranks to stop if rank 0 never dispatched
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank 0: hands `todo` out to the other ranks, one point at a time per rank, calling
  // `done` as outcomes arrive and `tick` at least once a second; then tells them to stop.
  virtual void dispatch(const std::vector<long long>& todo, const PointDone& done,
                        const std::function<void()>& tick) = 0;
  // The other ranks: run the points rank 0 sends until it says stop.
  virtual void serve(const SweepJob& job) = 0;
};
// Starts MPI (nullptr with the reason in `error` when it cannot).
using MpiSessionFactory = std::unique_ptr<MpiSession> (*)(std::string& error);
void register_mpi(MpiSessionFactory factory);

}  // namespace hgsim::apps
