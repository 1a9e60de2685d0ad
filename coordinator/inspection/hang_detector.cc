#include "coordinator/inspection/hang_detector.h"

#include "absl/strings/str_cat.h"

namespace troika::coordinator {

HangDetector::HangDetector(const JobNegotiation& negotiation, StallOptions stall,
                           bool deadlock_detection)
    : negotiation_(negotiation), deadlock_detection_(deadlock_detection), stalls_(stall) {}

std::optional<std::string> HangDetector::Deadlock(const std::set<int>& departed, int size) const {
  if (!deadlock_detection_ || !deadlocks_.any_waiting() || !deadlocks_.AllBlocked(departed, size)) {
    return std::nullopt;
  }
  return deadlocks_.Check(negotiation_.NegotiatedPending(), departed, size);
}

absl::Time HangDetector::FirstCheck(absl::Time now) const {
  const absl::Duration first = FirstDeadline();
  if (!negotiation_.has_pending() || first == absl::InfiniteDuration()) {
    return absl::InfiniteFuture();
  }
  return now + first;
}

HangDetector::Stalls HangDetector::InspectStalls(absl::Time now) {
  const std::vector<PendingTensor> pending = negotiation_.Pending();
  const StallReport report = stalls_.Inspect(pending, now);
  const StallOptions& options = stalls_.options();
  Stalls stalls;
  if (!report.past_shutdown.empty()) {
    stalls.abort = absl::StrCat(FormatStalls(report.past_shutdown, options.shutdown_time),
                                " (--stall_shutdown_time)");
    return stalls;
  }
  if (!report.newly_stalled.empty()) {
    stalls.warning = absl::StrCat(FormatStalls(report.newly_stalled, options.warning_time),
                                  ". The ranks may have diverged (different tensors or order), "
                                  "or be hung or much slower.");
  }
  stalls.next_check = stalls_.NextCheck(pending);
  return stalls;
}

}  // namespace troika::coordinator
