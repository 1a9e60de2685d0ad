#pragma once
// FileStore: a transport::Store in a directory every rank of one host can see, one file per
// key. troika-bench's ranks as processes (--job_rank) bootstrap their raw communicator
// through it: the raw side must not borrow the Troika job's own store, which the client
// library keeps to itself.
//
// A key is written to a temporary file and renamed into place, so a reader sees a value
// whole or not at all. Get and Wait poll (every 1 ms): bootstrap only, never timed.
//
// Thread-safe. The directory must exist; the caller removes it (RemoveAll) when no rank
// needs it any more.

#include <string>
#include <vector>

#include "libclient/transport/store.h"

namespace troika::bench {

class FileStore : public transport::Store {
 public:
  explicit FileStore(std::string directory) : directory_(std::move(directory)) {}

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;

  // Removes the directory and every key in it.
  absl::Status RemoveAll();

 private:
  std::string PathOf(const std::string& key) const;

  const std::string directory_;
};

}  // namespace troika::bench
