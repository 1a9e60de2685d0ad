#include "bench/file_store.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"

namespace troika::bench {
namespace {

// The file's contents, or nullopt while it does not exist.
std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

}  // namespace

std::string FileStore::PathOf(const std::string& key) const {
  // Keys hold '/' (store prefixes); one flat directory keeps cleanup simple.
  return absl::StrCat(directory_, "/", absl::StrReplaceAll(key, {{"%", "%25"}, {"/", "%2F"}}));
}

absl::Status FileStore::Set(const std::string& key, const std::string& value) {
  static std::atomic<int> counter{0};
  const std::string path = PathOf(key);
  const std::string temporary = absl::StrCat(path, ".tmp.", getpid(), ".", counter++);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    if (!out.flush()) {
      return absl::UnavailableError(
          absl::StrCat("FileStore: cannot write ", temporary, " (does ", directory_, " exist?)"));
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("FileStore: cannot rename ", temporary, ": ", error.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> FileStore::Get(const std::string& key, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string path = PathOf(key);
  while (true) {
    if (std::optional<std::string> value = ReadFile(path)) return *std::move(value);
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("FileStore: key '", key, "' not set within ",
                                                      absl::FormatDuration(timeout), " in ",
                                                      directory_));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
}

absl::Status FileStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  for (const std::string& key : keys) {
    absl::StatusOr<std::string> value =
        Get(key, std::max(deadline - absl::Now(), absl::ZeroDuration()));
    if (!value.ok()) return value.status();
  }
  return absl::OkStatus();
}

absl::Status FileStore::RemoveAll() {
  std::error_code error;
  std::filesystem::remove_all(directory_, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("FileStore: cannot remove ", directory_, ": ", error.message()));
  }
  return absl::OkStatus();
}

}  // namespace troika::bench
