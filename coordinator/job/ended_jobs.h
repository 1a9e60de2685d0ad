#pragma once
// EndedJobs: the aborts of jobs the registry has released, remembered for a while, so that a
// rank attaching late to a job that was aborted and released hears why, not "no job named".
// (A rank that crashed between its shutdown and its next init aborts the job; the others'
// agents may attach again only after the job, with nothing open, was released.) Only the
// job's own token reads its abort: anyone else is told nothing more than before.
//
// Bounded in count and time. Not thread-safe: the registry guards it with its lock.

#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/state/secret.h"

namespace troika::coordinator {

class EndedJobs {
 public:
  // Holds at most `capacity` aborts (the oldest go first), each for `ttl`.
  EndedJobs(size_t capacity, absl::Duration ttl) : capacity_(capacity), ttl_(ttl) {}

  // Job `name`, of `token`, released at `now` after it aborted with `status` (ABORTED).
  void Remember(const std::string& name, Secret token, absl::Status status, absl::Time now);
  // The abort of job `name` if it was released within the ttl before `now` and `token` is its
  // token; nullopt otherwise.
  std::optional<absl::Status> Lookup(const std::string& name, const std::string& token,
                                     absl::Time now);
  // Forgets job `name` (a new job of that name was created).
  void Forget(const std::string& name) { ended_.erase(name); }
  size_t size() const { return ended_.size(); }

 private:
  struct Ended {
    Secret token;
    absl::Status status;
    absl::Time released;
  };
  void DropExpired(absl::Time now);

  const size_t capacity_;
  const absl::Duration ttl_;
  std::map<std::string, Ended> ended_;
};

}  // namespace troika::coordinator
