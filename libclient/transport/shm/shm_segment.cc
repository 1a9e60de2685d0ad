#include "libclient/transport/shm/shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace troika::transport::shm_internal {
namespace {

constexpr uint64_t kMagic = 0x74726f696b61'0003;  // "troika", layout version 3

size_t AlignUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

size_t ControlBytes(int ranks) {
  return AlignUp(sizeof(SlotControl) + 2 * sizeof(uint64_t) * ranks, 64);
}
size_t SlotBytes(int ranks) { return ControlBytes(ranks) + 2 * kBufferBytes; }

std::string Describe(pid_t pid, int fd) {
  return absl::StrCat("shared memory of pid ", pid, " (fd ", fd, ")");
}

absl::Status Errno(int e, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(message);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

absl::StatusOr<void*> Map(int fd, size_t bytes, const std::string& name) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return Errno(errno, absl::StrCat("mmap of ", name));
  return base;
}

// Opens the creator's descriptor `fd` of process `pid` if it is one of our memfds; the
// descriptor's link is checked first, so that no other file of that process (a pid reused,
// another host's locator) is ever opened.
absl::StatusOr<int> OpenCreatorsDescriptor(pid_t pid, int fd, const std::string& name) {
  const std::string path = absl::StrCat("/proc/", pid, "/fd/", fd);
  char target[256] = {};
  const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
  if (n < 0) return Errno(errno, absl::StrCat("opening ", name, " (", path, ")"));
  const std::string expected = absl::StrCat("/memfd:", kMemfdName);
  if (std::string_view(target, n).substr(0, expected.size()) != expected) {
    return absl::NotFoundError(
        absl::StrCat("opening ", name, ": ", path, " is not a segment of ours"));
  }
  const int opened = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (opened < 0) return Errno(errno, absl::StrCat("opening ", name, " (", path, ")"));
  return opened;
}

}  // namespace

size_t SegmentBytes(int ranks) { return sizeof(Header) + ranks * SlotBytes(ranks); }

ShmSegment::ShmSegment(std::string name, int ranks, void* base, size_t bytes, int fd)
    : name_(std::move(name)),
      ranks_(ranks),
      base_(base),
      bytes_(bytes),
      control_bytes_(ControlBytes(ranks)),
      slot_bytes_(SlotBytes(ranks)),
      fd_(fd) {}

ShmSegment::~ShmSegment() {
  CloseDescriptor();
  munmap(base_, bytes_);
}

void ShmSegment::CloseDescriptor() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

std::string ShmSegment::locator() const {
  return absl::StrFormat("%d %d %016x", getpid(), fd_, header().nonce);
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(int ranks) {
  const size_t bytes = SegmentBytes(ranks);
  const int fd = memfd_create(kMemfdName, MFD_CLOEXEC);
  if (fd < 0) return Errno(errno, "creating shared memory (memfd_create)");
  const std::string name = Describe(getpid(), fd);
  absl::StatusOr<void*> base;
  // Allocated now, not as pages are first touched: memory the host or the container's limit
  // cannot give fails here with a message instead of a SIGBUS in some later collective.
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); e != 0) {
    base = absl::ResourceExhaustedError(
        absl::StrCat("allocating ", bytes, " bytes of ", name, ": ", std::strerror(e)));
  } else {
    base = Map(fd, bytes, name);
  }
  if (!base.ok()) {
    close(fd);
    return base.status();
  }
  std::random_device device;
  // A new memfd reads as zeros: every atomic starts at 0.
  Header& header = *static_cast<Header*>(*base);
  header.ranks = static_cast<uint32_t>(ranks);
  header.buffer_bytes = kBufferBytes;
  header.slot_bytes = SlotBytes(ranks);
  header.control_bytes = ControlBytes(ranks);
  header.nonce = (uint64_t{device()} << 32) ^ device();
  header.magic.store(kMagic, std::memory_order_release);
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, ranks, *base, bytes, fd));
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& locator,
                                                             int ranks) {
  std::vector<std::string> parts = absl::StrSplit(locator, ' ');
  int pid = 0;
  int creator_fd = 0;
  uint64_t nonce = 0;
  if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &pid) || pid <= 0 ||
      !absl::SimpleAtoi(parts[1], &creator_fd) || creator_fd < 0 ||
      !absl::SimpleHexAtoi(parts[2], &nonce)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", locator, "' does not locate a shared-memory segment (\"<pid> <fd> <nonce>\")"));
  }
  const std::string name = Describe(pid, creator_fd);
  ASSIGN_OR_RETURN(const int fd, OpenCreatorsDescriptor(pid, creator_fd, name));
  const size_t bytes = SegmentBytes(ranks);
  struct stat st {};
  absl::StatusOr<void*> base;
  if (fstat(fd, &st) != 0) {
    base = Errno(errno, absl::StrCat("fstat of ", name));
  } else if (static_cast<size_t>(st.st_size) != bytes) {
    base = absl::FailedPreconditionError(
        absl::StrCat(name, " has ", st.st_size, " bytes; a segment for ", ranks, " ranks has ",
                     bytes, " (do all ranks agree on the group size?)"));
  } else {
    base = Map(fd, bytes, name);
  }
  close(fd);
  if (!base.ok()) return base.status();
  auto segment = std::unique_ptr<ShmSegment>(new ShmSegment(name, ranks, *base, bytes, -1));
  const Header& header = segment->header();
  if (header.magic.load(std::memory_order_acquire) != kMagic ||
      header.ranks != static_cast<uint32_t>(ranks) || header.buffer_bytes != kBufferBytes ||
      header.slot_bytes != SlotBytes(ranks) || header.nonce != nonce) {
    return absl::FailedPreconditionError(absl::StrCat(
        name, " is not the troika segment of this version for ", ranks, " ranks it should be"));
  }
  return segment;
}

}  // namespace troika::transport::shm_internal
