#include "coordinator/inspection/stall_inspector.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/messages.h"

namespace troika::coordinator {
namespace {

bool Enabled(absl::Duration d) { return d > absl::ZeroDuration(); }

StalledTensor Describe(const PendingTensor& p, absl::Time now) {
  return StalledTensor{p.name, now - p.first_arrival, p.missing_ranks};
}

void OldestFirst(std::vector<StalledTensor>* v) {
  std::stable_sort(v->begin(), v->end(), [](const StalledTensor& a, const StalledTensor& b) {
    return a.waiting > b.waiting;
  });
}

}  // namespace

bool StallInspector::Warned(const PendingTensor& p) const {
  auto it = warned_.find(p.name);
  return it != warned_.end() && it->second == p.first_arrival;
}

StallReport StallInspector::Inspect(const std::vector<PendingTensor>& pending, absl::Time now) {
  StallReport report;
  std::map<std::string, absl::Time> still_warned;
  for (const PendingTensor& p : pending) {
    const absl::Duration waiting = now - p.first_arrival;
    if (Enabled(options_.shutdown_time) && waiting > options_.shutdown_time) {
      report.past_shutdown.push_back(Describe(p, now));
    }
    if (!Enabled(options_.warning_time)) continue;
    if (Warned(p)) {
      still_warned[p.name] = p.first_arrival;
    } else if (waiting > options_.warning_time) {
      report.newly_stalled.push_back(Describe(p, now));
      still_warned[p.name] = p.first_arrival;
    }
  }
  // Tensors no longer pending completed (or failed): forget them, so a later submission of
  // the same name is reported afresh.
  warned_ = std::move(still_warned);
  OldestFirst(&report.newly_stalled);
  OldestFirst(&report.past_shutdown);
  return report;
}

absl::Time StallInspector::NextCheck(const std::vector<PendingTensor>& pending) const {
  absl::Time next = absl::InfiniteFuture();
  for (const PendingTensor& p : pending) {
    if (Enabled(options_.warning_time) && !Warned(p)) {
      next = std::min(next, p.first_arrival + options_.warning_time);
    }
    if (Enabled(options_.shutdown_time)) {
      next = std::min(next, p.first_arrival + options_.shutdown_time);
    }
  }
  return next;
}

absl::Duration StallInspector::FirstDeadline() const {
  absl::Duration d = absl::InfiniteDuration();
  if (Enabled(options_.warning_time)) d = std::min(d, options_.warning_time);
  if (Enabled(options_.shutdown_time)) d = std::min(d, options_.shutdown_time);
  return d;
}

std::string FormatStalls(const std::vector<StalledTensor>& stalled, absl::Duration threshold) {
  std::string out = absl::StrCat(stalled.size(), stalled.size() == 1 ? " tensor" : " tensors",
                                 " stalled for more than ", absl::FormatDuration(threshold), ": ");
  for (size_t i = 0; i < stalled.size(); ++i) {
    const StalledTensor& s = stalled[i];
    absl::StrAppend(&out, i ? "; " : "", "'", s.name, "' (waiting ",
                    absl::FormatDuration(absl::Trunc(s.waiting, absl::Milliseconds(1))),
                    ") is missing ", FormatRanks(s.missing_ranks));
  }
  return out;
}

}  // namespace troika::coordinator
