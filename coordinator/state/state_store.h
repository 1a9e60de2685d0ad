#pragma once
// StateStore: the coordinator's state directory (--state_dir). One file per live job holds
// its JobRecord (name, size, token digest, node blocks, process sets); a restarted
// coordinator recreates its jobs from them, so reconnecting agents find their job, its token
// and its process sets as they were (docs/protocol.md, Coordinator restart). Files are
// replaced atomically (write, fsync, rename), so a crash leaves the old or the new record,
// never a torn one.
//
// Thread-safe: every call works on its own files.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "troika/v1/troika.pb.h"

namespace troika::coordinator {

class StateStore {
 public:
  // Creates `dir` (and dir/jobs) if needed; fails if it cannot be written.
  static absl::StatusOr<std::shared_ptr<StateStore>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  // Writes `record`, replacing the job's earlier one. Errors are logged, not returned: a
  // running job is not stopped because its record could not be written.
  void Save(const v1::JobRecord& record) const;
  // The job is over: its record goes.
  void Remove(const std::string& job) const;
  // Every record found; unreadable files are logged and skipped.
  std::vector<v1::JobRecord> Load() const;

 private:
  explicit StateStore(std::string dir) : dir_(std::move(dir)) {}
  std::string PathOf(const std::string& job) const;

  const std::string dir_;
};

}  // namespace troika::coordinator
