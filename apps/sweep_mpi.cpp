// `hgsim sweep --mpi`: the sweep's points over the ranks of an MPI job (OpenMPI). Rank 0
// owns the database and hands out one point at a time to each other rank; a rank runs its
// point in a process of its own (as -j does) and sends the outcome back. The outcomes are
// the same as on one machine: each point is simulated alone, from the same inputs.
//
// Messages (MPI_COMM_WORLD): rank 0 -> rank r: tag kWork, one long long (the point), or
// tag kStop; rank r -> rank 0: tag kResult, bytes: the point (8), its wall time in seconds
// (8, a double), then the outcome JSON text.
#include <mpi.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "apps/sweep_command.hpp"

namespace hgsim::apps {
namespace {

constexpr int kWork = 1;
constexpr int kStop = 2;
constexpr int kResult = 3;

class OpenMpiSession final : public MpiSession {
 public:
  OpenMpiSession() {
    MPI_Init(nullptr, nullptr);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~OpenMpiSession() override {
    if (rank_ == 0 && !stopped_) stop_all();
    MPI_Finalize();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void dispatch(const std::vector<long long>& todo, const PointDone& done,
                const std::function<void()>& tick) override {
    std::size_t next = 0;
    int busy = 0;
    for (int r = 1; r < size_ && next < todo.size(); ++r, ++busy) send_work(r, todo[next++]);
    auto last_tick = std::chrono::steady_clock::now();
    while (busy > 0) {
      int ready = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, kResult, MPI_COMM_WORLD, &ready, &status);
      if (!ready) {
        // Waiting in MPI_Recv would keep the progress line still; 1 ms naps cost nothing
        // next to a point.
        if (std::chrono::steady_clock::now() - last_tick > std::chrono::seconds(1)) {
          tick();
          last_tick = std::chrono::steady_clock::now();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      int count = 0;
      MPI_Get_count(&status, MPI_CHAR, &count);
      std::string message(static_cast<std::size_t>(count), '\0');
      MPI_Recv(message.data(), count, MPI_CHAR, status.MPI_SOURCE, kResult, MPI_COMM_WORLD,
               MPI_STATUS_IGNORE);
      long long k = 0;
      double wall_s = 0;
      std::memcpy(&k, message.data(), sizeof k);
      std::memcpy(&wall_s, message.data() + sizeof k, sizeof wall_s);
      if (next < todo.size())
        send_work(status.MPI_SOURCE, todo[next++]);
      else
        --busy;
      done(k, message.substr(sizeof k + sizeof wall_s), wall_s);
    }
    stop_all();
  }

  void serve(const SweepJob& job) override {
    for (;;) {
      long long k = 0;
      MPI_Status status;
      MPI_Recv(&k, 1, MPI_LONG_LONG, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &status);
      if (status.MPI_TAG == kStop) return;
      const auto start = std::chrono::steady_clock::now();
      const std::string outcome = run_point_in_child(job, k);
      const double wall_s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::string message(sizeof k + sizeof wall_s, '\0');
      std::memcpy(message.data(), &k, sizeof k);
      std::memcpy(message.data() + sizeof k, &wall_s, sizeof wall_s);
      message += outcome;
      MPI_Send(message.data(), static_cast<int>(message.size()), MPI_CHAR, 0, kResult,
               MPI_COMM_WORLD);
    }
  }

 private:
  void send_work(int rank, long long k) {
    MPI_Send(&k, 1, MPI_LONG_LONG, rank, kWork, MPI_COMM_WORLD);
  }
  void stop_all() {
    stopped_ = true;
    long long none = -1;
    for (int r = 1; r < size_; ++r) MPI_Send(&none, 1, MPI_LONG_LONG, r, kStop, MPI_COMM_WORLD);
  }
  int rank_ = 0;
  int size_ = 1;
  bool stopped_ = false;
};

std::unique_ptr<MpiSession> start_mpi(std::string& error) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    error = "MPI is already initialized in this process";
    return nullptr;
  }
  return std::make_unique<OpenMpiSession>();
}

}  // namespace

void register_mpi_sweeps() {
  register_mpi(start_mpi);
}

}  // namespace hgsim::apps
