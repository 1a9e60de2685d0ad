#include "libclient/executor.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace troika::internal {

Executor::Executor(TensorTable& table, transport::Communicator& comm, OutputPool& outputs,
                   std::function<absl::Status(absl::Status)> on_failure)
    : table_(table), comm_(comm), on_failure_(std::move(on_failure)), runner_(comm, outputs) {}

Executor::~Executor() { Stop(); }

void Executor::Start() {
  thread_ = std::thread([this] { Loop(); });
}

void Executor::Enqueue(std::vector<Response> responses) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_ || stopping_) return;
    for (Response& r : responses) queue_.push_back(std::move(r));
  }
  cv_.notify_one();
}

void Executor::Abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    queue_.clear();
  }
  comm_.Abort();
  cv_.notify_one();
}

void Executor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Executor::Loop() {
  for (;;) {
    Response response;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return aborted_ || stopping_ || !queue_.empty(); });
      if (aborted_ || queue_.empty()) return;
      response = std::move(queue_.front());
      queue_.pop_front();
    }
    Execute(response);
  }
}

void Executor::Execute(const Response& response) {
  if (response.is_error()) {
    // Names this rank never submitted (a departed rank's errors) are simply not here.
    for (const std::string& name : response.names) {
      if (auto entry = table_.Take(name)) {
        entry->state->Complete(absl::FailedPreconditionError(response.error));
      }
    }
    return;
  }
  std::vector<Entry> entries;
  entries.reserve(response.names.size());
  for (const std::string& name : response.names) {
    std::optional<Entry> entry = table_.Take(name);
    if (!entry) {
      // Every rank submitted it, so it is ours unless the table was closed under us.
      absl::Status closed = table_.status();
      for (Entry& e : entries) e.state->Complete(closed);
      if (closed.ok()) {
        on_failure_(absl::InternalError(absl::StrCat("the coordinator scheduled '", name,
                                                     "', which this rank has not submitted")));
      }
      return;
    }
    entries.push_back(std::move(*entry));
  }
  std::vector<Entry*> pointers;
  for (Entry& e : entries) pointers.push_back(&e);
  absl::Status status = runner_.Run(response, pointers);
  if (!status.ok()) status = on_failure_(status);
  for (Entry& e : entries) e.state->Complete(status);
}

}  // namespace troika::internal
