#include "coordinator/state/state_store.h"

#include <fcntl.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace troika::coordinator {
namespace {

constexpr char kSuffix[] = ".job";

absl::Status WriteAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", strerror(errno)));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    done += static_cast<size_t>(n);
  }
  const bool ok = done == bytes.size() && fsync(fd) == 0;
  const int saved = errno;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return absl::InternalError(
        absl::StrCat("cannot write ", path, ": ", strerror(ok ? errno : saved)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<StateStore>> StateStore::Open(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(dir) / "jobs", error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("--state_dir ", dir, ": cannot create it: ", error.message()));
  }
  auto store = std::shared_ptr<StateStore>(new StateStore(dir));
  const std::string probe = absl::StrCat(dir, "/jobs/.probe");
  if (absl::Status s = WriteAtomically(probe, ""); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--state_dir ", dir, ": ", s.message()));
  }
  unlink(probe.c_str());
  return store;
}

std::string StateStore::PathOf(const std::string& job) const {
  // Job names may hold any character and be 256 long: the file is named by a digest.
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(job.data()), job.size(), digest);
  return absl::StrCat(
      dir_, "/jobs/",
      absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), 16)),
      kSuffix);
}

void StateStore::Save(const v1::JobRecord& record) const {
  if (absl::Status s = WriteAtomically(PathOf(record.name()), record.SerializeAsString());
      !s.ok()) {
    TROIKA_LOG(ERROR) << "job '" << record.name() << "': " << s.message()
                      << "; a restarted coordinator will not know the job as it is now";
  }
}

void StateStore::Remove(const std::string& job) const {
  const std::string path = PathOf(job);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    TROIKA_LOG(WARNING) << "cannot remove " << path << ": " << strerror(errno);
  }
}

std::vector<v1::JobRecord> StateStore::Load() const {
  std::vector<v1::JobRecord> records;
  std::error_code error;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(dir_) / "jobs", error)) {
    const std::string path = entry.path().string();
    if (!absl::EndsWith(path, kSuffix)) continue;
    std::ifstream in(path, std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    v1::JobRecord record;
    if (!in || !record.ParseFromString(bytes.str()) || record.name().empty() ||
        PathOf(record.name()) != path) {
      TROIKA_LOG(WARNING) << "skipping " << path << ": not a job record";
      continue;
    }
    records.push_back(std::move(record));
  }
  if (error) TROIKA_LOG(WARNING) << "cannot read " << dir_ << "/jobs: " << error.message();
  return records;
}

}  // namespace troika::coordinator
