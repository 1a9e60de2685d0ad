#pragma once
// Plain mirrors of the session messages of proto/troika/v1/troika.proto. Core classes (the
// negotiator, the client's controller and executor) work on these; only the gRPC adapters see
// generated code (common/wire.h converts).

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/types.h"

namespace troika {

// The reserved name of every rank's Context::Join request (type kJoin).
inline constexpr char kJoinTensorName[] = "troika/join";
// Reserved name prefixes of Context::AddProcessSet / RemoveProcessSet: set-0 barriers that
// the coordinator interprets (docs/protocol.md, Process sets).
inline constexpr char kAddProcessSetPrefix[] = "troika/process_set/add/";
inline constexpr char kRemoveProcessSetPrefix[] = "troika/process_set/remove/";
// Reserved name prefix of Context::ElasticCommit: a set-0 barrier at which an elastic job
// admits the nodes waiting to join (docs/elastic.md).
inline constexpr char kElasticCommitPrefix[] = "troika/elastic/commit/";

// One collective submitted by one rank.
struct TensorRequest {
  int rank = 0;
  std::string name;
  CollectiveType type = CollectiveType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int root = 0;
  DeviceClass device = DeviceClass::kCpu;
  std::vector<int64_t> splits;  // alltoall only; empty: even split of dim 0
  // Non-zero on the wire only: the request is the one this rank last submitted under this
  // response-cache id, and only `rank` and the id were sent (the coordinator resolves it).
  int32_t cache_id = 0;
  // Grouped operations: the group's name (empty: not grouped) and its number of tensors.
  std::string group;
  int group_size = 0;
  // The process set negotiating this request (0: the whole job). `rank` is the global rank
  // on the wire; the coordinator hands its set's negotiator the position in the set.
  int process_set = 0;
  // AddProcessSet: the new set's global ranks; RemoveProcessSet: {id}. Empty otherwise.
  std::vector<int> process_set_ranks;
  // GPU float32 allreduce only: carried as 16-bit floats on the data plane.
  Compression compression = Compression::kNone;

  // Bytes of the tensor this request describes.
  int64_t ByteSize() const;
  // Bytes of one dim-0 row: the product of the other dimensions times the element size.
  int64_t RowBytes() const;
  bool operator==(const TensorRequest&) const = default;
};

// One unit of work, executed by every rank in the same order.
struct Response {
  CollectiveType type = CollectiveType::kAllreduce;
  std::vector<std::string> names;  // > 1: a fused allreduce, in fusion-buffer order
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int root = 0;
  DeviceClass device = DeviceClass::kCpu;
  // allgather: dim 0 of every rank for every tensor, row-major [names.size()][size];
  // reducescatter: dim 0 each rank receives, [size].
  std::vector<int64_t> sizes;
  // alltoall: rows rank i sends to rank j at [i * size + j].
  std::vector<int64_t> splits;
  // Non-empty: every named tensor failed on every rank with this message.
  std::string error;
  // Response cache: empty, or the cache id of each tensor, parallel to `names`.
  std::vector<int32_t> cache_ids;
  // Every id in cache_ids was announced in an earlier response, so the wire carries the ids
  // alone and receivers restore `names` from them.
  bool ids_known = false;
  // Ranks that had joined (Context::Join) when this response was made, ascending; they take
  // part without a tensor of their own, using `elements` (per name) for its size.
  std::vector<int> joined_ranks;
  std::vector<int64_t> elements;
  // The process set it runs in (0: the whole job); ranks outside the set skip it.
  int process_set = 0;
  // An allreduce's wire format (TensorRequest::compression).
  Compression compression = Compression::kNone;

  bool is_error() const { return !error.empty(); }
};

// The coordinator could not resolve a request sent as `cache_id` alone (the id was evicted
// meanwhile): `rank` sends it again in full.
struct CacheMiss {
  int rank = 0;
  int32_t cache_id = 0;
};

// A rank's process ended without leaving its job cleanly (reported by its agent).
struct RankExit {
  int rank = 0;
  std::string host;
  // -1: its session ended without goodbye while its process lived on. 0: it exited cleanly
  // before joining the job (it never opened a session): it leaves, the job goes on.
  int exit_code = 0;
  int signal = 0;  // non-zero: killed by this signal
  // Non-empty: its agent ended its session with this verdict on what it sent (exit_code -1).
  std::string reason{};

  // What a shell reports for it: the exit code, or 128 + the signal.
  int ShellCode() const { return signal != 0 ? 128 + signal : exit_code; }
};

// A rank's application threads are blocked waiting for these ops (sorted, distinct names);
// empty: no longer blocked.
struct WaitState {
  int rank = 0;
  std::vector<std::string> waiting_for;
};

// What the coordinator wants a rank to report about its execution.
struct ClientSettings {
  int report_interval_ms = 0;  // 0: no ExecReport
  bool report_phases = false;  // include execution phases (a timeline is being written)
  int send_cycle_us = 0;       // hold requests up to this long to send them together (0: don't)
  bool operator==(const ClientSettings&) const = default;
};

enum class PhaseKind { kQueue = 0, kCopyIn = 1, kCollective = 2, kCopyOut = 3 };

// One execution phase of one response on a rank, on that rank's clock.
struct PhaseSpan {
  PhaseKind kind = PhaseKind::kQueue;
  absl::Time start;
  absl::Time end;
  std::vector<std::string> names;
};

// One training step of a rank (Context::MarkStep): compute + negotiation_wait +
// communication == duration. See StepSample in the protocol.
struct StepSample {
  absl::Duration duration;
  absl::Duration compute;
  absl::Duration negotiation_wait;
  absl::Duration communication;
};

// Steady-state schedules (docs/protocol.md, Schedules): what a rank did in a schedule since
// its last report, as times before the report's sent_at. A tensor's index is its place in the
// schedule's period (entries in order, each entry's names in order).
struct ScheduleProgress {
  int64_t schedule = 0;
  // Rounds first_round, first_round + 1, ... that completed on the rank: for each round, when
  // the rank submitted each of the period's tensors (rounds x tensors), and when each entry
  // completed (rounds x entries).
  int64_t first_round = 0;
  std::vector<absl::Duration> submitted_ago;
  std::vector<absl::Duration> completed_ago;
  // Every tensor submitted and not completed, while one of them has waited long enough to
  // matter to the stall inspector.
  struct Waiting {
    int tensor = 0;
    int64_t round = 0;
    absl::Duration submitted_ago;
  };
  std::vector<Waiting> waiting;
  // Tensors n (of these rounds) such that the rank saw an operation complete (a Wait or a
  // Poll that found it done) between its submissions of tensors n and n + 1 of one round (n
  // the last tensor: and tensor 0 of the next round): the latter may depend on an earlier
  // result, so the two must not share a collective.
  std::vector<int32_t> cut_after;

  bool empty() const { return submitted_ago.empty() && waiting.empty(); }
};

// A rank's report about its execution (ClientSettings), and its step samples.
struct ExecReport {
  int rank = 0;
  absl::Time sent_at;           // the rank's clock
  int64_t allreduce_bytes = 0;  // completed since the session opened
  std::vector<PhaseSpan> phases;
  std::vector<StepSample> steps;  // ended since the last report
  std::optional<ScheduleProgress> schedule;
};

// One message down a session stream: responses to execute in order (with the cache ids that
// stop being valid after them and requests to send again), or an abort.
// Steady-state schedules (docs/protocol.md, Schedules): one period of the job's responses,
// executed cyclically by every rank without requests. Entries carry names and cache ids.
struct Schedule {
  int64_t id = 0;
  std::vector<Response> entries;
};

// A schedule's tensors, by cache id and by name. A rank that executes the schedule may have
// sent requests for them before it had it: the coordinator and agents drop those.
struct ScheduleTensors {
  explicit ScheduleTensors(const Schedule& schedule);
  // Whether `request` (a cache id alone, or in full) is for one of them (process set 0).
  bool Names(const TensorRequest& request) const;
  std::set<int32_t> ids;
  std::set<std::string> names;
};

struct DownMessage {
  std::vector<Response> responses;
  // The number of responses.front() in the job's one response order (1, 2, ...); 0: these
  // responses are not part of it (meant for one session only).
  int64_t seq = 0;
  // Cache ids that are invalid once `responses` are applied (evicted by the coordinator).
  std::vector<int32_t> evicted_cache_ids;
  // Requests to send again in full. A coordinator sends each only to its rank's session.
  std::vector<CacheMiss> misses;
  std::optional<ClientSettings> settings;  // present: replaces the settings in force
  std::string abort_reason;                // non-empty: the job was aborted; nothing follows
  std::optional<RankExit> abort_cause;     // the rank exit that aborted the job, if one did
  // Present (with abort_reason): an elastic job's generation ended, not the job.
  std::optional<MembershipChange> membership_change;
  // Coordinator restart (docs/protocol.md): send up the responses numbered replay_from ..
  // replay_to (0: no such request)...
  int64_t replay_from = 0;
  int64_t replay_to = 0;
  // ... and: every session of the job resumed; send again what got no response.
  bool resumed = false;
  // Present: every rank executes this schedule from here on (after `responses`).
  std::optional<Schedule> schedule;
  // Non-zero: a rank deviated from this schedule; every rank deviates too.
  int64_t end_schedule = 0;
};

// The status payload (a serialized v1::MembershipChange) of a rank's failure when its elastic
// job's generation ended (troika::GetMembershipChange).
inline constexpr char kMembershipChangePayload[] = "troika.dev/membership-change";

// What an agent reconnecting to a restarted coordinator has seen of its job (Hello.resume).
struct SessionResume {
  int64_t received = 0;         // responses 1 .. received
  int32_t max_cache_id = 0;     // the highest cache id ever announced to it
  int64_t max_schedule_id = 0;  // the highest schedule id it was sent
};

// "rank 2 on host-a exited with code 1", "rank 2 on host-a was killed by signal 9 (Killed)",
// "rank 2 on host-a lost its session without leaving the job" (exit_code -1).
std::string DescribeRankExit(const RankExit& exit);

// How a tensor of `process_set` is named in wait states, stall and deadlock reports:
// `name` itself in set 0, else "name (process set 2)".
std::string ProcessSetTensorName(int process_set, const std::string& name);

// "rank 3", "ranks 0-2", "ranks 0, 2, 5-7". `ranks` sorted ascending.
std::string FormatRanks(const std::vector<int>& ranks);

}  // namespace troika
