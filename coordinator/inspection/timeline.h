#pragma once
// Timeline: a Chrome trace (JSON Object Format) of one job, merging every rank, for
// chrome://tracing and ui.perfetto.dev. Layout and meaning: docs/timeline.md.
//
//   process "negotiation": one thread per distinct tensor name; per negotiation one complete
//     event named after the tensor (first rank's submission -> ready) and one "arrive" instant
//     per rank inside it.
//   process "rank N": the execution phases the rank reported ("queue", "copy_in",
//     "collective", "copy_out"), one thread per phase; a phase that overlaps an earlier one of
//     the same kind (responses queued behind each other) gets its own lane ("queue 2", ...).
//
// Every time passed in is on the coordinator's clock (the caller maps client times); ts 0 is
// `origin` and earlier times are clamped to 0. Events are written as they come (stdio buffered,
// one short line each), so the file holds them in call order, not time order — both viewers
// sort. The file is valid JSON only after Close().
//
// Size cap: an event that would take the file past `max_bytes` (less room kept for the closing
// bytes) is dropped, as is every later one; a single global instant event "timeline truncated
// at size cap" marks where. The file never exceeds max(max_bytes, header + 256 bytes); the
// header is about 100 bytes plus the escaped job name.
//
// Names (tensors, job) are JSON-escaped; bytes that are not valid UTF-8 become U+FFFD so the
// file always loads.
//
// Thread contract: not thread-safe; the owning Job serialises every call. Calls never block on
// anything but the (buffered) file write.

#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/messages.h"

namespace troika::coordinator {

// What a rank's executor was doing (common/messages.h PhaseKind), reported by the clients.
inline constexpr int kNumExecPhases = 4;

// "queue", "copy_in", "collective", "copy_out".
std::string_view ExecPhaseName(PhaseKind phase);

class Timeline {
 public:
  // Smallest accepted `max_bytes`.
  static constexpr int64_t kMinMaxBytes = 4096;
  // Lanes per (rank, phase); beyond this, overlapping phases share the lane that frees first
  // (and may then nest wrongly in the viewer).
  static constexpr int kMaxLanes = 8;
  // The "tensors" argument of a rank phase is cut to about this many bytes.
  static constexpr size_t kMaxTensorsArg = 256;

  // Creates or truncates `path` and writes the header and the track names. `job`: shown in
  // the trace's metadata. `size` (>= 1): ranks in the job, one process each. `max_bytes`
  // (>= kMinMaxBytes): the size cap above. `origin`: the coordinator time that becomes ts 0.
  // Fails with INVALID_ARGUMENT on a bad argument, or with the errno's code and a message
  // naming `path` and the reason when the file cannot be created.
  static absl::StatusOr<std::unique_ptr<Timeline>> Open(const std::string& path,
                                                        const std::string& job, int size,
                                                        int64_t max_bytes, absl::Time origin);

  ~Timeline();  // Close()s; an error is logged
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // One negotiation of `tensor`: a complete event from `first_arrival` to `ready` with args
  // {"op", "cached", "ranks" (arrivals known), "last_rank" (latest arrival; -1 if none)}, and
  // an "arrive" instant with args {"rank": r} for each arrivals_by_rank[r] that is finite
  // (absl::InfinitePast() marks an unknown arrival).
  void Negotiation(const std::string& tensor, std::string_view op, absl::Time first_arrival,
                   absl::Time ready, const std::vector<absl::Time>& arrivals_by_rank, bool cached);

  // One execution phase of rank `rank` from `start` to `end`, covering `tensors` (a fused
  // response covers many): named after the phase, args {"tensors": "a,b,c" (cut to about
  // kMaxTensorsArg bytes, then " (+N more)"), "count": N}. A rank outside [0, size) is ignored.
  void RankPhase(int rank, PhaseKind phase, absl::Time start, absl::Time end,
                 const std::vector<std::string>& tensors);

  // An elastic job's membership changed at `at` (docs/elastic.md): a global instant event
  // "membership change" with args {"reason": `reason`, "size": `size`}; the ranks of the next
  // generation (`size` of them, numbered anew) are the rank processes from then on, processes
  // for ranks beyond the ones so far named.
  void MembershipChange(absl::Time at, const std::string& reason, int size);

  // Writes the closing bytes, flushes and closes the file. Returns the first write error (the
  // message names the path), else OK. Idempotent: later calls return the same status. Events
  // after Close() are ignored.
  absl::Status Close();

  // Bytes handed to the file so far (its size once closed without error).
  int64_t bytes_written() const { return bytes_written_; }
  // Whether the size cap dropped an event.
  bool truncated() const { return truncated_; }
  const std::string& path() const { return path_; }

 private:
  Timeline(std::string path, FILE* file, int size, int64_t max_bytes, absl::Time origin);

  void WriteHeader(const std::string& job);
  // The process name and sort index of ranks [from, to), committed at ts 0 with ts `ts_ns`.
  void NameRanks(int from, int to, int64_t ts_ns);
  // Nanoseconds since origin_, clamped to >= 0.
  int64_t Since(absl::Time t) const;
  // The tensor's thread in the negotiation process; appends its name event to event_ if new.
  int TensorTid(const std::string& tensor);
  // The rank's thread for a phase over [start_ns, end_ns); appends its name event if new.
  int PhaseTid(int rank, PhaseKind phase, int64_t start_ns, int64_t end_ns);
  // Writes event_ (events, each starting with ",\n") if it fits under the cap; else writes
  // the truncation marker at `ts_ns` (once) and drops it and everything after.
  void Commit(int64_t ts_ns);
  void Write(std::string_view bytes);
  bool writable() const { return file_ != nullptr && status_.ok() && !truncated_; }

  // Constant after construction
  const std::string path_;
  const int64_t max_bytes_;
  const absl::Time origin_;

  int size_;             // ranks named so far
  FILE* file_;           // null once closed
  absl::Status status_;  // the first write error
  int64_t bytes_written_ = 0;
  bool first_event_ = true;  // no event written yet: the next one has no leading comma
  bool truncated_ = false;
  std::string event_;  // scratch for the event(s) being built; keeps its capacity
  std::map<std::string, int, std::less<>> tensor_tids_;
  // Per rank and phase: the end (ns since origin) of the last event in each lane.
  std::vector<std::array<std::vector<int64_t>, kNumExecPhases>> lanes_;
};

}  // namespace troika::coordinator
