#pragma once
// FileStore: a Store kept as files in one directory, for ranks that are forked processes of a
// test. Set() writes a temporary file and renames it into place, so a reader never sees a
// partial value; Get() and Wait() poll every millisecond. Header-only.
//
// Thread contract: thread-safe (every call only touches the file system).

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "libclient/transport/store.h"

namespace troika::transport {

class FileStore : public Store {
 public:
  // `dir` exists and outlives the store.
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    const std::string path = Path(key);
    const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
    {
      std::ofstream out(tmp, std::ios::binary);
      out << value;
      if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("cannot rename ", tmp));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      std::ifstream in(Path(key), std::ios::binary);
      if (in.good()) {
        std::stringstream value;
        value << in.rdbuf();
        return value.str();
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat("store key '", key, "' was not set within ",
                                                        absl::FormatDuration(timeout)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override {
    const absl::Time deadline = absl::Now() + timeout;
    for (const std::string& key : keys) {
      absl::StatusOr<std::string> value =
          Get(key, std::max(deadline - absl::Now(), absl::ZeroDuration()));
      if (!value.ok()) return value.status();
    }
    return absl::OkStatus();
  }

 private:
  std::string Path(const std::string& key) const {
    return absl::StrCat(dir_, "/", absl::StrReplaceAll(key, {{"%", "%25"}, {"/", "%2F"}}));
  }

  const std::string dir_;
};

}  // namespace troika::transport
