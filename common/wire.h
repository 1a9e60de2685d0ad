#pragma once
// Conversions between the plain message structs (common/messages.h, troika/types.h) and the
// generated protocol messages. The only code outside *_service.cc / *_client.cc that sees
// generated types.

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "common/messages.h"
#include "troika/types.h"
#include "troika/v1/troika.pb.h"

namespace troika {

void ToWire(const TensorRequest& in, v1::Request* out);
TensorRequest FromWire(const v1::Request& in);

// Appends the per-rank requests a wire request stands for: itself, or one per listed rank
// of an agent's compacted request. INVALID_ARGUMENT if the per-rank lists do not match.
absl::Status AppendFromWire(const v1::Request& in, std::vector<TensorRequest>* out);
// Writes `requests` (one tensor, several ranks) as one compacted wire request if they agree
// on everything but dim 0 and alltoall splits; returns false (writing nothing) otherwise.
bool CompactToWire(const std::vector<TensorRequest>& requests, v1::Request* out);
void ToWire(const Response& in, v1::Response* out);
Response FromWire(const v1::Response& in);
void ToWire(const RankExit& in, v1::RankExit* out);
RankExit FromWire(const v1::RankExit& in);
void ToWire(const MembershipChange& in, v1::MembershipChange* out);
MembershipChange FromWire(const v1::MembershipChange& in);
void ToWire(const MembershipChange::Admitted& in, v1::Admitted* out);
MembershipChange::Admitted FromWire(const v1::Admitted& in);
// An elastic job's generation ended: ABORTED with `message` and `change` as its payload
// (kMembershipChangePayload), and back (none unless ABORTED with a well-formed payload).
absl::Status MembershipChanged(const std::string& message, const MembershipChange& change);
absl::Status MembershipChanged(const std::string& message, const v1::MembershipChange& change);
std::optional<MembershipChange> MembershipChangeOf(const absl::Status& status);
void ToWire(const DownMessage& in, v1::Down* out);
// An abort without a reason gets a generic one, so abort_reason is non-empty exactly for
// aborts.
DownMessage FromWire(const v1::Down& in);
void ToWire(const ExecReport& in, v1::ExecReport* out);
ExecReport FromWire(const v1::ExecReport& in);
void ToWire(const WaitState& in, v1::WaitState* out);
WaitState FromWire(const v1::WaitState& in);
void ToWire(const Membership& in, v1::Membership* out);
// An attach's memberships, in the order of its ranks: the first in `membership`, the rest in
// `more` (non-empty `in`).
void ToWire(const std::vector<Membership>& in, v1::AttachResponse* out);
Membership FromWire(const v1::Membership& in);

}  // namespace troika
