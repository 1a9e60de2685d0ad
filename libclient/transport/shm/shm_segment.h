#pragma once
// ShmSegment: one communicator's shared-memory segment (an anonymous memfd, mapped), its
// layout, and the locator other ranks open it by. Internal to the shared-memory data plane
// (shm_transport.h); the layout is described in docs/shm.md.
//
//   Header             magic, rank count, buffer size, the barrier's sleeper count and
//                      futex word, the abort record (code and reason)
//   Slot 0   control   pid, barriers entered, alltoallv send sizes (two sets, by phase parity)
//            buffer 0  kBufferBytes
//            buffer 1  kBufferBytes
//   Slot 1 ...         one slot per rank, each 64-byte aligned
//
// Each rank writes only its own slot (and the header's shared words, atomically); it reads
// every slot. Rank 0 creates the segment with memfd_create: it has no name in /dev/shm, so no
// process's death, kill -9 included, can leave it behind; its memory lives while some process
// maps it or holds its descriptor. The other ranks open it through rank 0's descriptor
// (/proc/<pid>/fd/<fd>), check that it is a memfd of ours, and check the random nonce in its
// header against the one rank 0 published; rank 0 closes its descriptor once every rank has
// mapped it. The mapping lives as long as the ShmSegment object.
//
// Thread contract: the object is immutable after construction but for CloseDescriptor(),
// which the connecting thread calls before it shares the segment; the shared words are
// atomics used by every rank (see shm_sync.h).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace troika::transport::shm_internal {

// Bytes of each of a slot's two buffers: the largest piece of a collective a rank stages at
// once.
inline constexpr size_t kBufferBytes = size_t{1} << 20;
// The memfd name of every segment (what /proc/<pid>/fd/<fd> links to: "/memfd:troika-shm").
inline constexpr char kMemfdName[] = "troika-shm";
inline constexpr int kMaxRanks = 1024;

// Bytes of the segment of a group of `ranks` ranks (what ShmSegment::Create allocates).
size_t SegmentBytes(int ranks);

inline constexpr uint32_t kAbortBit = 0x80000000u;

struct alignas(64) Header {
  std::atomic<uint64_t> magic;
  uint32_t ranks;
  uint32_t reserved;
  uint64_t nonce;  // random, published with the locator: proves a rank opened this segment
  uint64_t buffer_bytes;
  uint64_t slot_bytes;
  uint64_t control_bytes;
  // The barrier (shm_sync.h): ranks that are about to sleep or sleep on `word`, and the futex
  // word itself, whose low 31 bits count wake-ups and whose top bit (kAbortBit) says the group
  // is aborted. Each rank's arrivals are its own SlotControl::barriers.
  alignas(64) std::atomic<uint32_t> sleepers;
  alignas(64) std::atomic<uint32_t> word;
  // The abort record: 0 none, 1 being written, 2 written. The first abort wins.
  alignas(64) std::atomic<uint32_t> abort_state;
  int32_t abort_code;  // an absl::StatusCode
  char abort_reason[1024];
};

// The start of each slot.
struct alignas(64) SlotControl {
  std::atomic<int32_t> pid;
  // Barriers this rank has entered: its arrival flag. Only this rank writes it; a barrier
  // is passed when every rank's count has reached it (shm_sync.h).
  std::atomic<uint64_t> barriers;
  // Followed by uint64_t send_sizes[2][ranks] (alltoallv), by phase parity.
};

class ShmSegment {
 public:
  // Creates, allocates and maps a new segment for `ranks` ranks, keeping its descriptor open
  // for the others to open: RESOURCE_EXHAUSTED when the memory cannot be allocated, INTERNAL
  // with errno's text when the kernel refuses otherwise.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(int ranks);
  // Maps the segment of `ranks` ranks whose locator() is `locator`: NOT_FOUND when it names no
  // segment of ours here (another host or PID namespace, or its creator has exited or closed
  // it), PERMISSION_DENIED when the creator's descriptors may not be opened (another user),
  // FAILED_PRECONDITION when it is not a segment for `ranks` ranks, INVALID_ARGUMENT when
  // `locator` is malformed.
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(const std::string& locator, int ranks);

  // "<pid> <fd> <nonce>": what Open() takes, valid while the creator holds its descriptor.
  std::string locator() const;
  // The creator's descriptor, once no other rank needs to open the segment (the mapping
  // stays). A no-op on the other ranks and after the first call.
  void CloseDescriptor();

  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();

  // For messages: "shared memory of pid <creator> (fd <fd>)".
  const std::string& name() const { return name_; }
  int ranks() const { return ranks_; }
  Header& header() const { return *reinterpret_cast<Header*>(base_); }
  SlotControl& control(int rank) const { return *reinterpret_cast<SlotControl*>(Slot(rank)); }
  // Rank `rank`'s alltoallv send sizes for phase parity `parity` (ranks() entries).
  uint64_t* send_sizes(int rank, int parity) const {
    return reinterpret_cast<uint64_t*>(Slot(rank) + sizeof(SlotControl)) + parity * ranks_;
  }
  // Rank `rank`'s staging buffer `parity` (kBufferBytes).
  char* buffer(int rank, int parity) const {
    return Slot(rank) + control_bytes_ + parity * kBufferBytes;
  }

 private:
  ShmSegment(std::string name, int ranks, void* base, size_t bytes, int fd);
  char* Slot(int rank) const {
    return static_cast<char*>(base_) + sizeof(Header) + rank * slot_bytes_;
  }

  // Constant after construction.
  const std::string name_;
  const int ranks_;
  void* const base_;
  const size_t bytes_;
  const size_t control_bytes_;
  const size_t slot_bytes_;
  int fd_;  // the creator's descriptor until CloseDescriptor(); -1 elsewhere
};

}  // namespace troika::transport::shm_internal
