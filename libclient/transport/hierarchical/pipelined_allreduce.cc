#include "libclient/transport/hierarchical/pipelined_allreduce.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/functional/function_ref.h"

namespace troika::transport {
namespace {

// The leader's helper: allreduces chunk after chunk across nodes as the main thread hands
// them over (Ready), until Quit or an error.
class CrossWorker {
 public:
  CrossWorker(Communicator* cross, size_t chunks, absl::FunctionRef<absl::Status(size_t)> run)
      : cross_(cross) {
    if (cross_ == nullptr) return;
    thread_ = std::thread([this, chunks, run] {
      for (size_t i = 0; i < chunks; ++i) {
        {
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait(lock, [&] { return ready_ > i || quit_; });
          if (quit_) return;
        }
        const absl::Status s = run(i);
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (s.ok()) crossed_ = i + 1;
          status_.Update(s);
        }
        cv_.notify_all();
        if (!s.ok()) return;
      }
    });
  }
  ~CrossWorker() { Stop(); }

  // Chunk i is reduced within the node: it may cross.
  void Ready(size_t i) {
    if (cross_ == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_ = i + 1;
    }
    cv_.notify_all();
  }
  // Blocks until chunk i has crossed (or crossing failed: its error).
  absl::Status WaitCrossed(size_t i) {
    if (cross_ == nullptr) return absl::OkStatus();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return crossed_ > i || !status_.ok(); });
    return crossed_ > i ? absl::OkStatus() : status_;
  }
  // Ends the helper: aborts `cross` first when the call failed, so it cannot stay blocked.
  void Stop(bool failed = false) {
    if (!thread_.joinable()) return;
    if (failed) cross_->Abort();
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  Communicator* const cross_;
  std::mutex mu_;
  std::condition_variable cv_;
  size_t ready_ = 0;     // guarded by mu_: chunks reduced within the node
  size_t crossed_ = 0;   // guarded by mu_: chunks allreduced across nodes
  bool quit_ = false;    // guarded by mu_
  absl::Status status_;  // guarded by mu_: the helper's error
  std::thread thread_;
};

}  // namespace

absl::Status PipelinedAllreduce(Communicator* local, Communicator* cross, void* data, size_t count,
                                DataType dtype, ReduceOp op, size_t chunk) {
  const size_t esize = DataTypeSize(dtype);
  const size_t chunks = (count + chunk - 1) / chunk;
  auto at = [&](size_t i) { return static_cast<char*>(data) + i * chunk * esize; };
  auto elements = [&](size_t i) { return std::min(chunk, count - i * chunk); };
  auto run_cross = [&](size_t i) { return cross->Allreduce(at(i), elements(i), dtype, op); };
  CrossWorker worker(cross, chunks, run_cross);
  absl::Status status;
  for (size_t i = 0; i <= chunks && status.ok(); ++i) {
    if (i < chunks) {
      if (local) status = local->Allreduce(at(i), elements(i), dtype, op);
      if (status.ok()) worker.Ready(i);
    }
    if (status.ok() && i > 0) {
      status = worker.WaitCrossed(i - 1);
      if (status.ok() && local) status = local->Broadcast(at(i - 1), elements(i - 1) * esize, 0);
    }
  }
  worker.Stop(!status.ok());
  return status;
}

}  // namespace troika::transport
