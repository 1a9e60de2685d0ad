#include "agent/launch/rank_file_sink.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace troika::agent {
namespace {

// mkdir -p `path`; false with errno set if some part cannot be made.
bool MakeDirectories(const std::string& path) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string part = path.substr(0, slash);
    if (mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) return false;
    if (slash == std::string::npos) break;
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return false;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return false;
  }
  return true;
}

// Opens (creates, truncates) `path`, making its directory first; -1 with errno on failure.
int OpenRankFile(const std::string& path) {
  if (!MakeDirectories(path.substr(0, path.rfind('/')))) return -1;
  return open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0666);
}

void WriteAll(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text.remove_prefix(static_cast<size_t>(n));
  }
}

// The rank of a line "[RANK] text" and where its text starts; -1 if it has no such prefix.
int RankOf(absl::string_view line, size_t* text_start) {
  const size_t close = line.find("] ");
  int rank = -1;
  if (line.empty() || line[0] != '[' || close == absl::string_view::npos || close < 2 ||
      !absl::SimpleAtoi(line.substr(1, close - 1), &rank) || rank < 0 ||
      line.substr(1, close - 1).find_first_not_of("0123456789") != absl::string_view::npos) {
    return -1;
  }
  *text_start = close + 2;
  return rank;
}

// Where the first line of `text` ends (after its terminator): at '\n' (with its '\r' before
// it), or at a '\r' alone, which LineForwarder writes at once with a prefix after it; the end
// of `text` if it has no terminator.
size_t LineEnd(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n') return i + 1;
    if (text[i] == '\r' && (i + 1 == text.size() || text[i + 1] != '\n')) return i + 1;
  }
  return text.size();
}

}  // namespace

std::string RankFileSink::PathOf(const std::string& dir, const std::string& stream, int rank,
                                 int size) {
  // horovodrun's padding: the digits of the highest rank, size - 1.
  const size_t width = std::to_string(size > 1 ? size - 1 : 0).size();
  std::string number = std::to_string(rank);
  if (number.size() < width) number.insert(0, width - number.size(), '0');
  return absl::StrCat(dir, "/rank.", number, "/", stream);
}

RankFileSink::RankFileSink(std::string dir, std::string stream, int size, OutputSink& next)
    : dir_(std::move(dir)), stream_(std::move(stream)), size_(size), next_(next) {}

absl::StatusOr<std::unique_ptr<RankFileSink>> RankFileSink::Create(const std::string& dir,
                                                                   const std::string& stream,
                                                                   int size, OutputSink& next) {
  std::unique_ptr<RankFileSink> sink(new RankFileSink(dir, stream, size, next));
  for (int rank = 0; rank < size; ++rank) {
    const std::string path = PathOf(dir, stream, rank, size);
    const int fd = OpenRankFile(path);
    if (fd < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("--output-filename: cannot create ", path, ": ", strerror(errno)));
    }
    sink->fds_[rank] = fd;
  }
  return sink;
}

RankFileSink::~RankFileSink() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [rank, fd] : fds_) {
    if (fd >= 0) close(fd);
  }
}

int RankFileSink::FileOf(int rank) {
  auto it = fds_.find(rank);
  if (it != fds_.end()) return it->second;
  const std::string path = PathOf(dir_, stream_, rank, size_);
  const int fd = OpenRankFile(path);
  if (fd < 0) {
    next_.Write(absl::StrCat("troikarun: --output-filename: cannot create ", path, ": ",
                             strerror(errno), "; rank ", rank, "'s ", stream_,
                             " goes to the terminal only\n"));
  }
  fds_[rank] = fd;
  return fd;
}

void RankFileSink::Write(std::string_view text) {
  next_.Write(text);
  std::lock_guard<std::mutex> lock(mu_);
  while (!text.empty()) {
    const size_t end = LineEnd(text);
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end);
    size_t start = 0;
    const int rank = RankOf(absl::string_view(line.data(), line.size()), &start);
    if (rank < 0) continue;
    const int fd = FileOf(rank);
    if (fd >= 0) WriteAll(fd, line.substr(start));
  }
}

}  // namespace troika::agent
