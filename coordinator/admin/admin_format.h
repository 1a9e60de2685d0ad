#pragma once
// Human-readable text for troikactl: aligned tables and titled sections. Each section of
// `show` is its own function, so later ones (timeline, autotune, response cache) slot in
// without touching the others.
//
// Pure functions; thread-safe.

#include <string>
#include <vector>

#include "coordinator/job/job_info.h"

namespace troika::coordinator {

// Columns padded to their widest cell, separated by two spaces; the first row is the header.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// `troikactl list`: one row per job, or "no jobs" when there are none.
std::string FormatJobList(const std::vector<JobSummary>& jobs);

// `troikactl show`: the sections below, in order, separated by blank lines.
std::string FormatJobInfo(const JobInfo& info);
std::string FormatJobSection(const JobInfo& info);
std::string FormatRanksSection(const JobInfo& info);
std::string FormatPendingSection(const JobInfo& info);
std::string FormatStragglersSection(const JobInfo& info);
// Autotune progress and timeline state; one line each.
std::string FormatTelemetrySection(const JobInfo& info);

}  // namespace troika::coordinator
