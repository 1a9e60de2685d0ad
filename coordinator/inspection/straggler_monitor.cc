#include "coordinator/inspection/straggler_monitor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/messages.h"

namespace troika::coordinator {

StragglerMonitor::StragglerMonitor(std::string job, int size, absl::Duration margin)
    : job_(std::move(job)), margin_(margin), stats_(size) {}

void StragglerMonitor::OnReady(int set, const std::vector<ReadyRecord>& records, absl::Time now) {
  if (set != 0) return;
  for (const ReadyRecord& record : records) stats_.OnReady(record.arrivals);
  if (stats_.tensors() - checked_at_ < kCheckEvery) return;
  checked_at_ = stats_.tensors();
  if (now - logged_at_ < kLogEvery) return;
  std::vector<int> stragglers = stats_.Stragglers(margin_);
  if (stragglers == logged_) return;
  logged_at_ = now;
  Log(std::move(stragglers));
}

void StragglerMonitor::Log(std::vector<int> stragglers) {
  if (stragglers.empty()) {
    TROIKA_LOG(INFO) << "job '" << job_ << "': no straggling ranks any more";
  } else {
    const StragglerSnapshot snapshot = stats_.Snapshot();
    std::string detail;
    for (int r : stragglers) {
      const RankLateness& l = snapshot.ranks[r];
      absl::StrAppend(&detail, detail.empty() ? "" : "; ", "rank ", r, " last for ",
                      l.window_last_count, " of ", snapshot.window_size, " recent tensors, by ",
                      absl::FormatDuration(l.window_last_lateness), " on average; mean lateness ",
                      absl::FormatDuration(l.mean_lateness), ", max ",
                      absl::FormatDuration(l.max_lateness));
    }
    TROIKA_LOG(WARNING) << "job '" << job_ << "': " << FormatRanks(stragglers)
                        << " straggling (--straggler_margin " << absl::FormatDuration(margin_)
                        << "): " << detail;
  }
  logged_ = std::move(stragglers);
}

}  // namespace troika::coordinator
