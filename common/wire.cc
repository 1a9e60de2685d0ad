#include "common/wire.h"

#include <algorithm>

namespace troika {

// The proto enums use the same numbering as the C++ ones (checked below), so a cast is a
// faithful mapping. Out-of-range values from a peer are rejected by validation upstream.
static_assert(static_cast<int>(DataType::kFloat64) == v1::FLOAT64);
static_assert(static_cast<int>(DataType::kBFloat16) == v1::BFLOAT16);
static_assert(static_cast<int>(DataType::kInt16) == v1::INT16);
static_assert(static_cast<int>(DataType::kUint16) == v1::UINT16);
static_assert(static_cast<int>(DataType::kBool) == v1::BOOL);
static_assert(kNumDataTypes == v1::DataType_ARRAYSIZE);
static_assert(static_cast<int>(ReduceOp::kProduct) == v1::PRODUCT);
static_assert(static_cast<int>(CollectiveType::kJoin) == v1::JOIN);
static_assert(static_cast<int>(DeviceClass::kGpu) == v1::GPU);
static_assert(static_cast<int>(Compression::kBFloat16) == v1::COMPRESSION_BFLOAT16);

void ToWire(const TensorRequest& in, v1::Request* out) {
  out->set_rank(in.rank);
  if (in.cache_id != 0) {  // the id stands for everything else
    out->set_cache_id(in.cache_id);
    return;
  }
  out->set_name(in.name);
  out->set_type(static_cast<v1::CollectiveType>(in.type));
  out->set_dtype(static_cast<v1::DataType>(in.dtype));
  out->mutable_shape()->Assign(in.shape.begin(), in.shape.end());
  out->set_reduce_op(static_cast<v1::ReduceOp>(in.reduce_op));
  out->set_prescale(in.prescale);
  out->set_postscale(in.postscale);
  out->set_root(in.root);
  out->set_device(static_cast<v1::DeviceClass>(in.device));
  out->mutable_splits()->Assign(in.splits.begin(), in.splits.end());
  out->set_group(in.group);
  out->set_group_size(in.group_size);
  out->set_process_set(in.process_set);
  out->mutable_process_set_ranks()->Assign(in.process_set_ranks.begin(),
                                           in.process_set_ranks.end());
  out->set_compression(static_cast<v1::Compression>(in.compression));
}

TensorRequest FromWire(const v1::Request& in) {
  TensorRequest out;
  out.rank = in.rank();
  out.name = in.name();
  out.type = static_cast<CollectiveType>(in.type());
  out.dtype = static_cast<DataType>(in.dtype());
  out.shape.assign(in.shape().begin(), in.shape().end());
  out.reduce_op = static_cast<ReduceOp>(in.reduce_op());
  out.prescale = in.prescale();
  out.postscale = in.postscale();
  out.root = in.root();
  out.device = static_cast<DeviceClass>(in.device());
  out.splits.assign(in.splits().begin(), in.splits().end());
  out.cache_id = in.cache_id();
  out.group = in.group();
  out.group_size = in.group_size();
  out.process_set = in.process_set();
  out.process_set_ranks.assign(in.process_set_ranks().begin(), in.process_set_ranks().end());
  out.compression = static_cast<Compression>(in.compression());
  return out;
}

absl::Status AppendFromWire(const v1::Request& in, std::vector<TensorRequest>* out) {
  if (in.ranks().empty()) {
    out->push_back(FromWire(in));
    return absl::OkStatus();
  }
  const int n = in.ranks_size();
  const bool per_rank_dim0 = !in.dim0s().empty();
  if (per_rank_dim0 && in.dim0s_size() != n) {
    return absl::InvalidArgumentError("a compacted request needs one dim 0 per rank");
  }
  if (!in.rank_splits().empty() && in.rank_splits_size() % n != 0) {
    return absl::InvalidArgumentError("a compacted request needs the same splits count per rank");
  }
  if (per_rank_dim0 && in.shape().empty()) {
    return absl::InvalidArgumentError("a compacted request with dim 0s needs a shape");
  }
  const int splits_per_rank = in.rank_splits_size() / n;
  TensorRequest base = FromWire(in);
  for (int i = 0; i < n; ++i) {
    TensorRequest r = base;
    r.rank = in.ranks(i);
    if (per_rank_dim0) r.shape[0] = in.dim0s(i);
    if (splits_per_rank > 0) {
      r.splits.assign(in.rank_splits().begin() + i * splits_per_rank,
                      in.rank_splits().begin() + (i + 1) * splits_per_rank);
    }
    out->push_back(std::move(r));
  }
  return absl::OkStatus();
}

bool CompactToWire(const std::vector<TensorRequest>& requests, v1::Request* out) {
  if (requests.empty()) return false;
  const TensorRequest& first = requests.front();
  const bool dim0_free =
      first.type == CollectiveType::kAllgather || first.type == CollectiveType::kAlltoall;
  const bool explicit_splits = !first.splits.empty();
  for (const TensorRequest& r : requests) {
    bool same =
        r.name == first.name && r.type == first.type && r.dtype == first.dtype &&
        r.reduce_op == first.reduce_op && r.prescale == first.prescale &&
        r.postscale == first.postscale && r.root == first.root && r.device == first.device &&
        r.cache_id == first.cache_id && r.group == first.group &&
        r.group_size == first.group_size && r.process_set == first.process_set &&
        r.process_set_ranks == first.process_set_ranks && r.compression == first.compression &&
        r.splits.empty() != explicit_splits && r.shape.size() == first.shape.size();
    for (size_t d = dim0_free ? 1 : 0; same && d < r.shape.size(); ++d) {
      same = r.shape[d] == first.shape[d];
    }
    if (!same || (!dim0_free && r.splits != first.splits)) return false;
  }
  ToWire(first, out);
  out->clear_splits();
  for (const TensorRequest& r : requests) {
    out->add_ranks(r.rank);
    if (dim0_free && !r.shape.empty()) out->add_dim0s(r.shape[0]);
    if (first.type == CollectiveType::kAlltoall) {
      for (int64_t s : r.splits) out->add_rank_splits(s);
    }
  }
  return true;
}

void ToWire(const Response& in, v1::Response* out) {
  out->set_type(static_cast<v1::CollectiveType>(in.type));
  if (!in.ids_known) {  // else receivers restore the names from the ids
    for (const std::string& name : in.names) out->add_names(name);
  }
  out->set_dtype(static_cast<v1::DataType>(in.dtype));
  out->set_reduce_op(static_cast<v1::ReduceOp>(in.reduce_op));
  out->set_prescale(in.prescale);
  out->set_postscale(in.postscale);
  out->set_root(in.root);
  out->set_device(static_cast<v1::DeviceClass>(in.device));
  out->mutable_sizes()->Assign(in.sizes.begin(), in.sizes.end());
  out->mutable_splits()->Assign(in.splits.begin(), in.splits.end());
  out->set_error(in.error);
  out->mutable_cache_ids()->Assign(in.cache_ids.begin(), in.cache_ids.end());
  out->mutable_joined_ranks()->Assign(in.joined_ranks.begin(), in.joined_ranks.end());
  out->mutable_elements()->Assign(in.elements.begin(), in.elements.end());
  out->set_process_set(in.process_set);
  out->set_compression(static_cast<v1::Compression>(in.compression));
}

Response FromWire(const v1::Response& in) {
  Response out;
  out.type = static_cast<CollectiveType>(in.type());
  out.names.assign(in.names().begin(), in.names().end());
  out.dtype = static_cast<DataType>(in.dtype());
  out.reduce_op = static_cast<ReduceOp>(in.reduce_op());
  out.prescale = in.prescale();
  out.postscale = in.postscale();
  out.root = in.root();
  out.device = static_cast<DeviceClass>(in.device());
  out.sizes.assign(in.sizes().begin(), in.sizes().end());
  out.splits.assign(in.splits().begin(), in.splits().end());
  out.error = in.error();
  out.cache_ids.assign(in.cache_ids().begin(), in.cache_ids().end());
  out.ids_known = !out.cache_ids.empty() && out.names.empty();
  out.joined_ranks.assign(in.joined_ranks().begin(), in.joined_ranks().end());
  out.elements.assign(in.elements().begin(), in.elements().end());
  out.process_set = in.process_set();
  out.compression = static_cast<Compression>(in.compression());
  return out;
}

void ToWire(const RankExit& in, v1::RankExit* out) {
  out->set_rank(in.rank);
  out->set_host(in.host);
  out->set_exit_code(in.exit_code);
  out->set_signal(in.signal);
  out->set_reason(in.reason);
}

RankExit FromWire(const v1::RankExit& in) {
  return {in.rank(), in.host(), in.exit_code(), in.signal(), in.reason()};
}

void ToWire(const MembershipChange& in, v1::MembershipChange* out) {
  out->set_epoch(in.epoch);
  out->set_size(in.size);
  out->mutable_next_rank()->Assign(in.next_rank.begin(), in.next_rank.end());
  out->set_at_commit(in.at_commit);
  out->set_joined(in.joined);
  for (const MembershipChange::Admitted& a : in.admitted) ToWire(a, out->add_admitted());
}

void ToWire(const MembershipChange::Admitted& in, v1::Admitted* out) {
  out->set_join_id(in.join_id);
  out->set_first_rank(in.first_rank);
}

MembershipChange::Admitted FromWire(const v1::Admitted& in) {
  return {in.join_id(), in.first_rank()};
}

MembershipChange FromWire(const v1::MembershipChange& in) {
  MembershipChange out;
  out.epoch = in.epoch();
  out.size = in.size();
  out.next_rank.assign(in.next_rank().begin(), in.next_rank().end());
  out.at_commit = in.at_commit();
  out.joined = in.joined();
  for (const v1::Admitted& a : in.admitted()) out.admitted.push_back(FromWire(a));
  return out;
}

absl::Status MembershipChanged(const std::string& message, const v1::MembershipChange& change) {
  absl::Status status = absl::AbortedError(message);
  status.SetPayload(kMembershipChangePayload, absl::Cord(change.SerializeAsString()));
  return status;
}

absl::Status MembershipChanged(const std::string& message, const MembershipChange& change) {
  v1::MembershipChange wire;
  ToWire(change, &wire);
  return MembershipChanged(message, wire);
}

std::optional<MembershipChange> MembershipChangeOf(const absl::Status& status) {
  if (!absl::IsAborted(status)) return std::nullopt;
  auto payload = status.GetPayload(kMembershipChangePayload);  // absl::optional
  v1::MembershipChange wire;
  if (!payload || !wire.ParseFromString(std::string(*payload))) return std::nullopt;
  return FromWire(wire);
}

void ToWire(const DownMessage& in, v1::Down* out) {
  if (!in.abort_reason.empty()) {
    out->mutable_abort()->set_reason(in.abort_reason);
    if (const auto& cause = in.abort_cause) ToWire(*cause, out->mutable_abort()->mutable_cause());
    if (const auto& change = in.membership_change)
      ToWire(*change, out->mutable_abort()->mutable_change());
    return;
  }
  if (in.replay_to > 0) {
    out->mutable_replay()->set_from_seq(in.replay_from);
    out->mutable_replay()->set_to_seq(in.replay_to);
    return;
  }
  v1::ResponseBatch* batch = out->mutable_responses();
  for (const Response& r : in.responses) ToWire(r, batch->add_responses());
  batch->set_seq(in.seq);
  batch->set_resumed(in.resumed);
  batch->mutable_evicted_cache_ids()->Assign(in.evicted_cache_ids.begin(),
                                             in.evicted_cache_ids.end());
  for (const CacheMiss& miss : in.misses) {
    v1::CacheMiss* wire = batch->add_misses();
    wire->set_rank(miss.rank);
    wire->set_cache_id(miss.cache_id);
  }
  if (in.settings) {
    batch->mutable_settings()->set_report_interval_ms(in.settings->report_interval_ms);
    batch->mutable_settings()->set_report_phases(in.settings->report_phases);
    batch->mutable_settings()->set_send_cycle_us(in.settings->send_cycle_us);
  }
  if (in.schedule) {
    v1::Schedule* schedule = batch->mutable_schedule();
    schedule->set_id(in.schedule->id);
    for (const Response& r : in.schedule->entries) ToWire(r, schedule->add_entries());
  }
  batch->set_end_schedule(in.end_schedule);
}

DownMessage FromWire(const v1::Down& in) {
  DownMessage out;
  if (in.has_abort()) {
    out.abort_reason = in.abort().reason();
    if (out.abort_reason.empty()) out.abort_reason = "the job was aborted";
    if (in.abort().has_cause()) {
      out.abort_cause = FromWire(in.abort().cause());
    }
    if (in.abort().has_change()) out.membership_change = FromWire(in.abort().change());
    return out;
  }
  if (in.has_replay()) {
    out.replay_from = in.replay().from_seq();
    out.replay_to = in.replay().to_seq();
    return out;
  }
  for (const v1::Response& r : in.responses().responses()) out.responses.push_back(FromWire(r));
  out.seq = in.responses().seq();
  out.resumed = in.responses().resumed();
  out.evicted_cache_ids.assign(in.responses().evicted_cache_ids().begin(),
                               in.responses().evicted_cache_ids().end());
  for (const v1::CacheMiss& miss : in.responses().misses()) {
    out.misses.push_back({miss.rank(), miss.cache_id()});
  }
  if (in.responses().has_settings()) {
    const v1::ClientSettings& settings = in.responses().settings();
    out.settings = ClientSettings{settings.report_interval_ms(), settings.report_phases(),
                                  settings.send_cycle_us()};
  }
  if (in.responses().has_schedule()) {
    Schedule schedule{in.responses().schedule().id(), {}};
    for (const v1::Response& r : in.responses().schedule().entries()) {
      schedule.entries.push_back(FromWire(r));
    }
    out.schedule = std::move(schedule);
  }
  out.end_schedule = in.responses().end_schedule();
  return out;
}

void ToWire(const ExecReport& in, v1::ExecReport* out) {
  out->set_rank(in.rank);
  out->set_sent_at_us(absl::ToUnixMicros(in.sent_at));
  out->set_allreduce_bytes(in.allreduce_bytes);
  for (const PhaseSpan& phase : in.phases) {
    v1::PhaseSpan* wire = out->add_phases();
    wire->set_kind(static_cast<v1::PhaseSpan::Kind>(phase.kind));
    wire->set_start_us(absl::ToUnixMicros(phase.start));
    wire->set_end_us(absl::ToUnixMicros(phase.end));
    for (const std::string& name : phase.names) wire->add_names(name);
  }
  for (const StepSample& step : in.steps) {
    v1::StepSample* wire = out->add_steps();
    wire->set_duration_us(absl::ToInt64Microseconds(step.duration));
    wire->set_compute_us(absl::ToInt64Microseconds(step.compute));
    wire->set_negotiation_wait_us(absl::ToInt64Microseconds(step.negotiation_wait));
    wire->set_communication_us(absl::ToInt64Microseconds(step.communication));
  }
  if (in.schedule) {
    const ScheduleProgress& progress = *in.schedule;
    v1::ScheduleProgress* wire = out->mutable_schedule();
    wire->set_schedule(progress.schedule);
    wire->set_first_round(progress.first_round);
    for (absl::Duration d : progress.submitted_ago) {
      wire->add_submitted_ago_us(absl::ToInt64Microseconds(d));
    }
    for (absl::Duration d : progress.completed_ago) {
      wire->add_completed_ago_us(absl::ToInt64Microseconds(d));
    }
    for (const ScheduleProgress::Waiting& w : progress.waiting) {
      wire->add_waiting_tensors(w.tensor);
      wire->add_waiting_rounds(w.round);
      wire->add_waiting_ago_us(absl::ToInt64Microseconds(w.submitted_ago));
    }
    for (int32_t n : progress.cut_after) wire->add_cut_after(n);
  }
}

ExecReport FromWire(const v1::ExecReport& in) {
  ExecReport out;
  out.rank = in.rank();
  out.sent_at = absl::FromUnixMicros(in.sent_at_us());
  out.allreduce_bytes = in.allreduce_bytes();
  for (const v1::PhaseSpan& wire : in.phases()) {
    PhaseSpan phase;
    // Unknown kinds from a newer peer read as the queue phase rather than out-of-range.
    phase.kind = wire.kind() >= 0 && wire.kind() <= 3 ? static_cast<PhaseKind>(wire.kind())
                                                      : PhaseKind::kQueue;
    phase.start = absl::FromUnixMicros(wire.start_us());
    phase.end = absl::FromUnixMicros(wire.end_us());
    phase.names.assign(wire.names().begin(), wire.names().end());
    out.phases.push_back(std::move(phase));
  }
  for (const v1::StepSample& wire : in.steps()) {
    out.steps.push_back(StepSample{absl::Microseconds(wire.duration_us()),
                                   absl::Microseconds(wire.compute_us()),
                                   absl::Microseconds(wire.negotiation_wait_us()),
                                   absl::Microseconds(wire.communication_us())});
  }
  if (in.has_schedule()) {
    const v1::ScheduleProgress& wire = in.schedule();
    ScheduleProgress& progress = out.schedule.emplace();
    progress.schedule = wire.schedule();
    progress.first_round = wire.first_round();
    for (int64_t us : wire.submitted_ago_us()) {
      progress.submitted_ago.push_back(absl::Microseconds(us));
    }
    for (int64_t us : wire.completed_ago_us()) {
      progress.completed_ago.push_back(absl::Microseconds(us));
    }
    // Unequal lists (a malformed report) keep their common prefix.
    const int waiting = std::min(
        {wire.waiting_tensors_size(), wire.waiting_rounds_size(), wire.waiting_ago_us_size()});
    for (int i = 0; i < waiting; ++i) {
      progress.waiting.push_back({wire.waiting_tensors(i), wire.waiting_rounds(i),
                                  absl::Microseconds(wire.waiting_ago_us(i))});
    }
    progress.cut_after.assign(wire.cut_after().begin(), wire.cut_after().end());
  }
  return out;
}

void ToWire(const WaitState& in, v1::WaitState* out) {
  out->set_rank(in.rank);
  out->clear_waiting_for();
  for (const std::string& name : in.waiting_for) out->add_waiting_for(name);
}

WaitState FromWire(const v1::WaitState& in) {
  WaitState out;
  out.rank = in.rank();
  out.waiting_for.assign(in.waiting_for().begin(), in.waiting_for().end());
  return out;
}

void ToWire(const Membership& in, v1::Membership* out) {
  out->set_rank(in.rank);
  out->set_size(in.size);
  out->set_local_rank(in.local_rank);
  out->set_local_size(in.local_size);
  out->set_cross_rank(in.cross_rank);
  out->set_cross_size(in.cross_size);
  out->set_epoch(in.epoch);
}

void ToWire(const std::vector<Membership>& in, v1::AttachResponse* out) {
  ToWire(in.front(), out->mutable_membership());
  for (size_t i = 1; i < in.size(); ++i) ToWire(in[i], out->add_more());
}

Membership FromWire(const v1::Membership& in) {
  Membership out;
  out.rank = in.rank();
  out.size = in.size();
  out.local_rank = in.local_rank();
  out.local_size = in.local_size();
  out.cross_rank = in.cross_rank();
  out.cross_size = in.cross_size();
  out.epoch = in.epoch();
  return out;
}

}  // namespace troika
