#pragma once
// The GPU data plane's finisher: a thread that completes the GPU operations the executor
// issued, in issue order, once each one's CUDA event has fired (docs/gpu.md). A CUDA error, an
// NCCL communicator's asynchronous error or an abort fails the operation and every one issued
// after it.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "libclient/cuda/cuda_status.h"
#include "libclient/cuda/nccl_comm.h"
#include "libclient/handles/op_state.h"

namespace troika::cuda {

class Finisher {
 public:
  // One issued GPU operation: its handles' states complete when `done` fires.
  struct Op {
    std::shared_ptr<Event> done;
    std::vector<std::shared_ptr<internal::OpState>> states;
    std::vector<absl::Status> outcomes;  // by state: a rank's own failure (Entry::outcome)
    std::vector<std::shared_ptr<uint8_t>> discarded;  // results received and thrown away
    NcclComm* comm = nullptr;                         // asked for asynchronous errors while waiting
  };

  // `aborted`: the data plane's abort flag (ops in flight fail cancelled once it is set);
  // `comms_mu`: held while a communicator is asked for its asynchronous error (the plane
  // aborts communicators under it); `on_failure`: the status every failed op completes with,
  // from the failure (null: the failure itself). Both outlive the finisher.
  Finisher(const std::atomic<bool>& aborted, std::mutex& comms_mu,
           std::function<absl::Status(absl::Status)> on_failure);
  ~Finisher() { Stop(); }
  Finisher(const Finisher&) = delete;
  Finisher& operator=(const Finisher&) = delete;

  // Starts the thread, on CUDA device `device`. Once.
  void Start(int device);
  // Completes `op` after those pushed before it.
  void Push(Op op);
  // Completes what is in flight (or fails it, when aborted), then ends the thread. Idempotent.
  void Stop();

 private:
  void Run(int device);
  // Polls `op`'s event until it fired, failed, or the plane aborted.
  absl::Status Await(const Op& op);

  const std::atomic<bool>& aborted_;
  std::mutex& comms_mu_;
  const std::function<absl::Status(absl::Status)> on_failure_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> in_flight_;  // guarded by mu_; in issue order
  bool stopping_ = false;     // guarded by mu_
  std::thread thread_;
};

}  // namespace troika::cuda
