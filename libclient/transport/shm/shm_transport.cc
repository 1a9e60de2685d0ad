#include "libclient/transport/shm/shm_transport.h"

#include <unistd.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "libclient/transport/shm/shm_communicator.h"
#include "libclient/transport/shm/shm_segment.h"
#include "libclient/transport/shm/shm_sync.h"

namespace troika::transport {
namespace {

using shm_internal::ShmSegment;
using shm_internal::ShmSync;

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// Rank 0: a fresh segment, published as "<name> <host>".
absl::StatusOr<std::unique_ptr<ShmSegment>> CreateAndPublish(const CommunicatorSpec& spec,
                                                             Store& store, const std::string& key) {
  ASSIGN_OR_RETURN(std::unique_ptr<ShmSegment> segment, ShmSegment::Create(spec.size));
  if (absl::Status s = store.Set(key, absl::StrCat(segment->name(), " ", HostName())); !s.ok()) {
    ShmSegment::Unlink(segment->name());
    return s;
  }
  return segment;
}

// Other ranks: rank 0's segment. `name` is set as soon as it is known.
absl::StatusOr<std::unique_ptr<ShmSegment>> OpenPublished(const CommunicatorSpec& spec,
                                                          Store& store, const std::string& key,
                                                          std::string& name) {
  ASSIGN_OR_RETURN(const std::string value, store.Get(key, spec.timeout));
  std::pair<std::string, std::string> name_host = absl::StrSplit(value, absl::MaxSplits(' ', 1));
  name = name_host.first;
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment = ShmSegment::Open(name, spec.size);
  if (absl::IsNotFound(segment.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank 0 (host '", name_host.second, "') created shared memory '", name,
                     "', which this rank (host '", HostName(),
                     "') cannot open: the shm data plane needs every "
                     "rank on one host (or rank 0 failed meanwhile): ",
                     segment.status().message()));
  }
  return segment;
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectMapped(const CommunicatorSpec& spec,
                                                            std::unique_ptr<ShmSegment> segment,
                                                            absl::Duration timeout) {
  segment->control(spec.rank).pid.store(getpid(), std::memory_order_release);
  auto sync = std::make_unique<ShmSync>(*segment, spec.rank);
  RETURN_IF_ERROR(sync->Barrier(timeout));  // every rank has mapped it
  ShmSegment::Unlink(segment->name());
  sync->WatchPeers();
  return std::make_unique<ShmCommunicator>(std::move(segment), std::move(sync), spec.rank,
                                           spec.timeout);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> ShmTransport::Connect(const CommunicatorSpec& spec,
                                                                    Store& store) {
  if (spec.size < 1 || spec.size > shm_internal::kMaxRanks || spec.rank < 0 ||
      spec.rank >= spec.size) {
    return absl::InvalidArgumentError(absl::StrCat("shm transport: invalid rank ", spec.rank,
                                                   " for group size ", spec.size, " (at most ",
                                                   shm_internal::kMaxRanks, " ranks)"));
  }
  if (spec.timeout <= absl::ZeroDuration() || spec.timeout > absl::Hours(24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shm transport: timeout must be in (0, 24h], got ", absl::FormatDuration(spec.timeout)));
  }
  const absl::Time deadline = absl::Now() + spec.timeout;
  const std::string key = absl::StrCat(spec.store_prefix, "shm/segment");
  std::string name;
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment =
      spec.rank == 0 ? CreateAndPublish(spec, store, key) : OpenPublished(spec, store, key, name);
  if (segment.ok()) name = (*segment)->name();
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      segment.ok() ? ConnectMapped(spec, *std::move(segment),
                                   std::max(deadline - absl::Now(), absl::Milliseconds(1)))
                   : segment.status();
  if (comm.ok()) return comm;
  if (!name.empty()) ShmSegment::Unlink(name);
  return absl::Status(
      comm.status().code(),
      absl::StrCat("shm connect failed (rank ", spec.rank, " of ", spec.size, ", store prefix '",
                   spec.store_prefix, "'): ", comm.status().message()));
}

}  // namespace troika::transport
