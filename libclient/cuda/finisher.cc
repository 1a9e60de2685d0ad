#include "libclient/cuda/finisher.h"

#include <chrono>
#include <utility>

#include "common/thread_name.h"

namespace troika::cuda {

Finisher::Finisher(const std::atomic<bool>& aborted, std::mutex& comms_mu,
                   std::function<absl::Status(absl::Status)> on_failure)
    : aborted_(aborted), comms_mu_(comms_mu), on_failure_(std::move(on_failure)) {}

void Finisher::Start(int device) {
  thread_ = std::thread([this, device] {
    NameThisThread("troika-finish");
    Run(device);
  });
}

void Finisher::Push(Op op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.push_back(std::move(op));
  }
  cv_.notify_one();
}

void Finisher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Finisher::Run(int device) {
  cudaSetDevice(device);
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !in_flight_.empty(); });
      if (in_flight_.empty()) return;
      op = in_flight_.front();
    }
    const absl::Status status = Await(op);
    std::deque<Op> failed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (status.ok()) {
        in_flight_.pop_front();
      } else {
        failed.swap(in_flight_);
      }
    }
    if (status.ok()) {
      for (size_t i = 0; i < op.states.size(); ++i) op.states[i]->Complete(op.outcomes[i]);
      continue;
    }
    // The context fails; every issued operation reports why (an abort's reason if known).
    const absl::Status reported = on_failure_ ? on_failure_(status) : status;
    for (Op& issued : failed) {
      for (auto& state : issued.states) state->Complete(reported);
    }
  }
}

absl::Status Finisher::Await(const Op& op) {
  for (int polls = 0;; ++polls) {
    cudaError_t e = cudaEventQuery(op.done->event);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) return CudaError(e, "a GPU operation failed");
    if (aborted_.load()) return absl::CancelledError("the GPU data plane was aborted");
    if (polls % 64 == 63) {
      std::lock_guard<std::mutex> lock(comms_mu_);
      if (absl::Status s = op.comm->AsyncError(); !s.ok()) return s;
    }
    // Spin briefly (small ops finish in microseconds), then poll without burning a core.
    if (polls < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace troika::cuda
