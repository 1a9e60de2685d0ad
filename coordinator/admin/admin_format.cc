#include "coordinator/admin/admin_format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/messages.h"

namespace troika::coordinator {
namespace {

// Durations for people: "850ms", "12.3s", "4m10s".
std::string Human(absl::Duration d) {
  if (d < absl::Seconds(1)) return absl::StrCat(absl::ToInt64Milliseconds(d), "ms");
  if (d < absl::Minutes(1)) return absl::StrFormat("%.1fs", absl::ToDoubleSeconds(d));
  return absl::FormatDuration(absl::Trunc(d, absl::Seconds(1)));
}

std::string Millis(absl::Duration d) {
  return absl::StrFormat("%.2fms", absl::ToDoubleMilliseconds(d));
}

std::string Bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0) {
    return absl::StrCat(bytes >> 20, " MiB");
  }
  return absl::StrCat(bytes, " bytes");
}

}  // namespace

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      absl::StrAppend(&line, row[c]);
      if (c + 1 < row.size()) line.append(widths[c] - row[c].size() + 2, ' ');
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string FormatJobList(const std::vector<JobSummary>& jobs) {
  if (jobs.empty()) return "no jobs\n";
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "SIZE", "STATE", "ATTACHED", "PENDING", "AGE"}};
  for (const JobSummary& j : jobs) {
    rows.push_back({j.name, absl::StrCat(j.size), j.state,
                    absl::StrCat(j.attached_ranks, "/", j.size), absl::StrCat(j.pending_tensors),
                    Human(j.age)});
  }
  return FormatTable(rows);
}

std::string FormatJobSection(const JobInfo& info) {
  std::string out =
      absl::StrCat("Job:             ", info.name, "\n", "Size:            ", info.size, " ranks\n",
                   "State:           ", info.state, "\n", "Epoch:           ", info.epoch, "\n",
                   "Age:             ", Human(info.age), "\n");
  if (info.min_size > 0) {
    absl::StrAppend(&out, "Elastic:         ", info.min_size, " to ", info.max_size,
                    " ranks; generation ", info.epoch,
                    info.generation_cause.empty() ? std::string()
                                                  : absl::StrCat(", after ", info.generation_cause),
                    "\n");
  }
  if (!info.abort_reason.empty()) {
    absl::StrAppend(&out, "Abort reason:    ", info.abort_reason, "\n");
  }
  absl::StrAppend(&out, "Fusion threshold: ", Bytes(info.negotiation.fusion_threshold_bytes), "\n",
                  "Cycle time:      ", Millis(info.negotiation.cycle_time), "\n");
  const CacheStats& c = info.cache;
  if (c.capacity == 0) {
    absl::StrAppend(&out, "Response cache:  off\n");
  } else {
    const int64_t ready = c.hits + c.misses;
    absl::StrAppend(&out, "Response cache:  ", c.entries, "/", c.capacity, " entries, ", c.hits,
                    " hits, ", c.misses, " misses",
                    ready > 0 ? absl::StrFormat(" (%.1f%% hits)", 100.0 * c.hits / ready) : "",
                    ", ", c.evictions, " evictions, ", c.resends, " resends\n");
  }
  const ScheduleInfo& s = info.schedules;
  if (!s.enabled) {
    absl::StrAppend(&out, "Schedules:       off\n");
  } else {
    absl::StrAppend(&out, "Schedules:       ");
    if (s.active != 0) {
      absl::StrAppend(&out, "schedule ", s.active, " in force (", s.entries, " responses, ",
                      s.tensors, " tensors; ", s.executing_ranks, " ranks executing it); ");
    } else {
      absl::StrAppend(&out, "none in force; ");
    }
    absl::StrAppend(&out, s.published, " published, ", s.ended, " ended\n");
  }
  return out;
}

std::string FormatRanksSection(const JobInfo& info) {
  std::vector<std::vector<std::string>> rows = {
      {"RANK", "HOST", "LOCAL", "CROSS", "SESSION", "DEPARTED"}};
  auto position = [](int r) { return r < 0 ? std::string("-") : absl::StrCat(r); };
  for (const RankInfo& r : info.ranks) {
    rows.push_back({absl::StrCat(r.rank), r.attached ? r.host : "(not attached)",
                    position(r.local_rank), position(r.cross_rank), r.connected ? "connected" : "-",
                    r.departed ? "yes" : "no"});
  }
  return absl::StrCat("Ranks:\n", FormatTable(rows));
}

std::string FormatPendingSection(const JobInfo& info) {
  if (info.pending.empty()) return "Pending tensors: none\n";
  std::vector<std::vector<std::string>> rows = {{"TENSOR", "WAITING", "MISSING"}};
  for (const PendingTensorInfo& p : info.pending) {
    rows.push_back({p.name, Human(p.waiting), FormatRanks(p.missing_ranks)});
  }
  return absl::StrCat("Pending tensors (", info.pending.size(), "):\n", FormatTable(rows));
}

std::string FormatStragglersSection(const JobInfo& info) {
  const StragglerSnapshot& s = info.stragglers;
  if (s.tensors == 0) return "Stragglers: no tensor negotiated yet\n";
  std::vector<std::vector<std::string>> rows = {
      {"RANK", "TENSORS", "MEAN LATE", "MAX LATE", "LAST", "LAST (WINDOW)", "WINDOW LATE"}};
  for (const RankLateness& l : s.ranks) {
    rows.push_back({absl::StrCat(l.rank), absl::StrCat(l.count), Millis(l.mean_lateness),
                    Millis(l.max_lateness), absl::StrCat(l.last_count),
                    absl::StrCat(l.window_last_count, "/", s.window_size),
                    Millis(l.window_last_lateness)});
  }
  return absl::StrCat("Stragglers (", s.tensors, " tensors, window of ", s.window_size,
                      "): ", s.straggling.empty() ? "none" : FormatRanks(s.straggling),
                      s.straggling.empty() ? "" : " straggling", "\n", FormatTable(rows));
}

std::string FormatTelemetrySection(const JobInfo& info) {
  const AutotuneInfo& a = info.autotune;
  auto params = [](const TuningParams& p) {
    return absl::StrCat("fusion ", Bytes(p.fusion_threshold_bytes), ", cycle ",
                        Millis(p.cycle_time));
  };
  std::string out = "Autotune:        ";
  if (!a.enabled) {
    absl::StrAppend(&out, "off\n");
  } else {
    absl::StrAppend(&out,
                    a.done              ? "done"
                    : a.warmup_left > 0 ? "warming up"
                                        : "tuning",
                    ", ", a.evaluations, "/", a.max_samples, " configurations; now ",
                    params(a.current));
    if (a.evaluations > 0) {
      absl::StrAppend(&out, "; best ", params(a.best), " at ",
                      absl::StrFormat("%.1f MB/s", a.best_score / 1e6));
    }
    absl::StrAppend(&out, "\n");
  }
  const TimelineInfo& t = info.timeline;
  absl::StrAppend(&out, "Timeline:        ",
                  t.path.empty() ? "off"
                                 : absl::StrCat(t.active ? "writing " : "last written to ", t.path,
                                                " (", Bytes(t.bytes_written),
                                                t.truncated ? ", truncated at its cap" : "", ")"),
                  "\n");
  return out;
}

std::string FormatJobInfo(const JobInfo& info) {
  return absl::StrJoin(
      {absl::StrCat(FormatJobSection(info), FormatTelemetrySection(info)), FormatRanksSection(info),
       FormatPendingSection(info), FormatStragglersSection(info)},
      "\n");
}

}  // namespace troika::coordinator
