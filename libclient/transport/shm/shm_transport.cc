#include "libclient/transport/shm/shm_transport.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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

std::vector<std::string> RankKeys(const std::string& prefix, int from, int to) {
  std::vector<std::string> keys;
  for (int r = from; r < to; ++r) keys.push_back(absl::StrCat(prefix, r));
  return keys;
}

// Rank 0: once every other rank is waiting for it, a fresh segment, published as
// "<locator> <host>" (or "! <error>" when it cannot be created).
absl::StatusOr<std::unique_ptr<ShmSegment>> CreateAndPublish(const CommunicatorSpec& spec,
                                                             Store& store, const std::string& key) {
  const std::string ready = absl::StrCat(spec.store_prefix, "shm/ready/");
  if (absl::Status s = store.Wait(RankKeys(ready, 1, spec.size), spec.timeout); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("waiting for the other ranks: ", s.message()));
  }
  absl::StatusOr<std::unique_ptr<ShmSegment>> created = ShmSegment::Create(spec.size);
  if (!created.ok()) {
    // The other ranks wait for the locator: tell them instead.
    store.Set(key, absl::StrCat("! ", created.status().message())).IgnoreError();
    return created.status();
  }
  RETURN_IF_ERROR(store.Set(key, absl::StrCat((*created)->locator(), " ", HostName())));
  return created;
}

// Other ranks: rank 0's segment.
absl::StatusOr<std::unique_ptr<ShmSegment>> OpenPublished(const CommunicatorSpec& spec,
                                                          Store& store, const std::string& key) {
  RETURN_IF_ERROR(store.Set(absl::StrCat(spec.store_prefix, "shm/ready/", spec.rank), "1"));
  ASSIGN_OR_RETURN(const std::string value, store.Get(key, spec.timeout));
  if (value.compare(0, 2, "! ") == 0) {
    return absl::UnavailableError(
        absl::StrCat("rank 0 could not create the shared memory: ", value.substr(2)));
  }
  // "<pid> <fd> <nonce> <host>"
  const size_t host_at = value.rfind(' ');
  const std::string host = host_at == std::string::npos ? "?" : value.substr(host_at + 1);
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment =
      ShmSegment::Open(value.substr(0, host_at), spec.size);
  if (absl::IsNotFound(segment.status()) || absl::IsPermissionDenied(segment.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "rank 0 (host '", host, "') created shared memory which this rank (host '", HostName(),
        "') cannot open: the shm data plane needs every rank on one host, in one PID namespace, ",
        "as one user (or rank 0 failed meanwhile): ", segment.status().message()));
  }
  return segment;
}

// Every rank announces in the store that it has mapped the segment and waits for the others
// there (so a job that fails meanwhile ends the wait, as it ends Gloo's); then rank 0 closes
// the descriptor the others opened the segment by.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectMapped(
    const CommunicatorSpec& spec, Store& store, std::unique_ptr<ShmSegment> segment,
    absl::Time deadline, const shm_internal::ShmWaitOptions& wait) {
  segment->control(spec.rank).pid.store(getpid(), std::memory_order_release);
  const std::string mapped = absl::StrCat(spec.store_prefix, "shm/mapped/");
  RETURN_IF_ERROR(store.Set(absl::StrCat(mapped, spec.rank), "1"));
  const std::vector<std::string> keys = RankKeys(mapped, 0, spec.size);
  auto remaining = [deadline] { return std::max(deadline - absl::Now(), absl::Milliseconds(1)); };
  if (absl::Status s = store.Wait(keys, remaining()); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("waiting for every rank to map ", segment->name(),
                                               ": ", s.message()));
  }
  segment->CloseDescriptor();
  auto sync = std::make_unique<ShmSync>(*segment, spec.rank, wait);
  sync->WatchPeers();
  RETURN_IF_ERROR(sync->Barrier(remaining()));
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
  absl::StatusOr<std::unique_ptr<ShmSegment>> segment =
      spec.rank == 0 ? CreateAndPublish(spec, store, key) : OpenPublished(spec, store, key);
  absl::StatusOr<std::unique_ptr<Communicator>> comm =
      segment.ok() ? ConnectMapped(spec, store, *std::move(segment), deadline, wait_)
                   : segment.status();
  if (comm.ok()) return comm;
  return absl::Status(
      comm.status().code(),
      absl::StrCat("shm connect failed (rank ", spec.rank, " of ", spec.size, ", store prefix '",
                   spec.store_prefix, "'): ", comm.status().message()));
}

}  // namespace troika::transport
