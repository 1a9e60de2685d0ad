#include "libclient/transport/shm/shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace troika::transport::shm_internal {
namespace {

constexpr uint64_t kMagic = 0x74726f696b61'0002;  // "troika", layout version 2

size_t AlignUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

size_t ControlBytes(int ranks) {
  return AlignUp(sizeof(SlotControl) + 2 * sizeof(uint64_t) * ranks, 64);
}
size_t SlotBytes(int ranks) { return ControlBytes(ranks) + 2 * kBufferBytes; }

std::string FreshName() {
  std::random_device device;
  const uint64_t nonce = (uint64_t{device()} << 32) ^ device();
  return absl::StrFormat("%s%d-%016x", kNamePrefix, getpid(), nonce);
}

absl::Status Errno(const std::string& what) {
  const int e = errno;
  const std::string message = absl::StrCat(what, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(message);
  return absl::InternalError(message);
}

absl::StatusOr<void*> Map(int fd, size_t bytes, const std::string& name) {
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return Errno(absl::StrCat("mmap of shared memory '", name, "'"));
  return base;
}

}  // namespace

size_t SegmentBytes(int ranks) { return sizeof(Header) + ranks * SlotBytes(ranks); }

ShmSegment::ShmSegment(std::string name, int ranks, void* base, size_t bytes)
    : name_(std::move(name)),
      ranks_(ranks),
      base_(base),
      bytes_(bytes),
      control_bytes_(ControlBytes(ranks)),
      slot_bytes_(SlotBytes(ranks)) {}

ShmSegment::~ShmSegment() { munmap(base_, bytes_); }

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(int ranks) {
  const std::string name = FreshName();
  const size_t bytes = SegmentBytes(ranks);
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return Errno(absl::StrCat("creating shared memory '", name, "'"));
  absl::StatusOr<void*> base;
  // Allocated now, not as pages are first touched: a /dev/shm too small for it (a container's
  // default 64 MiB) fails here with a message instead of a SIGBUS in some later collective.
  if (const int e = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); e != 0) {
    base = absl::ResourceExhaustedError(absl::StrCat(
        "allocating ", bytes, " bytes of shared memory for '", name, "': ", std::strerror(e),
        " (is /dev/shm large enough? a container's default is 64 MiB)"));
  } else {
    base = Map(fd, bytes, name);
  }
  close(fd);
  if (!base.ok()) {
    shm_unlink(name.c_str());
    return base.status();
  }
  // A new file reads as zeros: every atomic starts at 0.
  Header& header = *static_cast<Header*>(*base);
  header.ranks = static_cast<uint32_t>(ranks);
  header.buffer_bytes = kBufferBytes;
  header.slot_bytes = SlotBytes(ranks);
  header.control_bytes = ControlBytes(ranks);
  header.magic.store(kMagic, std::memory_order_release);
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, ranks, *base, bytes));
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& name, int ranks) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) return Errno(absl::StrCat("opening shared memory '", name, "'"));
  const size_t bytes = SegmentBytes(ranks);
  struct stat st {};
  absl::StatusOr<void*> base;
  if (fstat(fd, &st) != 0) {
    base = Errno(absl::StrCat("fstat of shared memory '", name, "'"));
  } else if (static_cast<size_t>(st.st_size) != bytes) {
    base = absl::FailedPreconditionError(
        absl::StrCat("shared memory '", name, "' has ", st.st_size, " bytes; a segment for ", ranks,
                     " ranks has ", bytes, " (do all ranks agree on the group size?)"));
  } else {
    base = Map(fd, bytes, name);
  }
  close(fd);
  if (!base.ok()) return base.status();
  auto segment = std::unique_ptr<ShmSegment>(new ShmSegment(name, ranks, *base, bytes));
  const Header& header = segment->header();
  if (header.magic.load(std::memory_order_acquire) != kMagic ||
      header.ranks != static_cast<uint32_t>(ranks) || header.buffer_bytes != kBufferBytes ||
      header.slot_bytes != SlotBytes(ranks)) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory '", name, "' is not a troika segment of this version for ",
                     ranks, " ranks"));
  }
  return segment;
}

void ShmSegment::Unlink(const std::string& name) { shm_unlink(name.c_str()); }

}  // namespace troika::transport::shm_internal
