#include "coordinator/inspection/timeline.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace troika::coordinator {
namespace {

constexpr int kNegotiationPid = 1;
// pid 0 is avoided: trace viewers may treat it as the kernel's idle (swapper) process.
int RankPid(int rank) { return rank + 2; }

// Room kept below the cap for the truncation marker (under 200 bytes) and the closing bytes.
constexpr int64_t kReserve = 256;
constexpr size_t kStdioBuffer = 64 << 10;
constexpr char kTruncatedName[] = "timeline truncated at size cap";
constexpr char kFooter[] = "\n]}\n";

absl::Status FileError(int error, const char* what, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrCat(what, " timeline '", path, "': ", strerrordesc_np(error)));
}

// Length of the valid UTF-8 sequence at the start of `s` (non-empty, first byte >= 0x80), or
// 0 if there is none: overlong forms, surrogates and code points past U+10FFFF are invalid.
size_t Utf8SequenceLength(std::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() < n || byte(1) < lo || byte(1) > hi) return 0;
  for (size_t i = 2; i < n; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return n;
}

// Appends `s` as a JSON string literal.
void AppendJsonString(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(s.substr(i));
      if (n == 0) {
        out->append("\\ufffd");
        ++i;
      } else {
        out->append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      case '\b':
        out->append("\\b");
        break;
      case '\f':
        out->append("\\f");
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 0xf]);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

// Microseconds with three decimals: exact, and no locale-dependent float formatting.
void AppendMicros(std::string* out, int64_t ns) {
  absl::StrAppend(out, ns / 1000, ".", absl::Dec(ns % 1000, absl::kZeroPad3));
}

// Appends ",\n{...common fields" of an event; the caller adds the rest and the closing brace.
void BeginEvent(std::string* out, std::string_view name, const char* cat, const char* ph, int pid,
                int tid, int64_t ts_ns) {
  out->append(",\n{\"name\":");
  AppendJsonString(out, name);
  absl::StrAppend(out, ",\"cat\":\"", cat, "\",\"ph\":\"", ph, "\",\"pid\":", pid, ",\"tid\":", tid,
                  ",\"ts\":");
  AppendMicros(out, ts_ns);
}

// A process_name or thread_name metadata event.
void AppendName(std::string* out, const char* what, int pid, int tid, std::string_view name) {
  absl::StrAppend(out, ",\n{\"name\":\"", what, "\",\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid,
                  ",\"args\":{\"name\":");
  AppendJsonString(out, name);
  out->append("}}");
}

// A process_sort_index or thread_sort_index metadata event.
void AppendSortIndex(std::string* out, const char* what, int pid, int tid, int index) {
  absl::StrAppend(out, ",\n{\"name\":\"", what, "\",\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid,
                  ",\"args\":{\"sort_index\":", index, "}}");
}

// "a,b,c", cut before the name that would take it past kMaxTensorsArg bytes.
std::string JoinTensors(const std::vector<std::string>& tensors) {
  std::string out;
  size_t i = 0;
  for (; i < tensors.size(); ++i) {
    if (out.size() + (i > 0 ? 1 : 0) + tensors[i].size() > Timeline::kMaxTensorsArg) break;
    if (i > 0) out.push_back(',');
    out.append(tensors[i]);
  }
  if (i == 0 && !tensors.empty()) {  // the first name alone is too long: cut it
    size_t n = Timeline::kMaxTensorsArg;
    while (n > 0 && (static_cast<unsigned char>(tensors[0][n]) & 0xC0) == 0x80) --n;
    out.assign(tensors[0], 0, n);
    out.append("...");
    i = 1;
  }
  if (i < tensors.size()) absl::StrAppend(&out, " (+", tensors.size() - i, " more)");
  return out;
}

bool Known(absl::Time t) { return t != absl::InfinitePast() && t != absl::InfiniteFuture(); }

}  // namespace

std::string_view ExecPhaseName(PhaseKind phase) {
  switch (phase) {
    case PhaseKind::kQueue:
      return "queue";
    case PhaseKind::kCopyIn:
      return "copy_in";
    case PhaseKind::kCollective:
      return "collective";
    case PhaseKind::kCopyOut:
      return "copy_out";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<Timeline>> Timeline::Open(const std::string& path,
                                                         const std::string& job, int size,
                                                         int64_t max_bytes, absl::Time origin) {
  if (size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeline '", path, "': the job size must be >= 1, got ", size));
  }
  if (max_bytes < kMinMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat("timeline '", path,
                                                   "': the size cap must be >= ", kMinMaxBytes,
                                                   " bytes, got ", max_bytes));
  }
  FILE* file = std::fopen(path.c_str(), "we");
  if (file == nullptr) return FileError(errno, "cannot create", path);
  std::unique_ptr<Timeline> timeline(new Timeline(path, file, size, max_bytes, origin));
  timeline->WriteHeader(job);
  if (!timeline->status_.ok()) return timeline->Close();
  return timeline;
}

Timeline::Timeline(std::string path, FILE* file, int size, int64_t max_bytes, absl::Time origin)
    : path_(std::move(path)),
      max_bytes_(max_bytes),
      origin_(origin),
      size_(size),
      file_(file),
      lanes_(size) {
  std::setvbuf(file_, nullptr, _IOFBF, kStdioBuffer);
}

Timeline::~Timeline() {
  if (file_ == nullptr) return;
  if (absl::Status status = Close(); !status.ok()) TROIKA_LOG(WARNING) << status;
}

void Timeline::WriteHeader(const std::string& job) {
  // The header is never capped: a file without it is not a trace.
  std::string header = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"job\":";
  AppendJsonString(&header, job);
  absl::StrAppend(&header, ",\"size\":", size_, ",\"origin\":\"",
                  absl::FormatTime(absl::RFC3339_full, origin_, absl::UTCTimeZone()),
                  "\"},\"traceEvents\":[");
  Write(header);
  event_.clear();
  AppendName(&event_, "process_name", kNegotiationPid, 0, "negotiation");
  AppendSortIndex(&event_, "process_sort_index", kNegotiationPid, 0, 0);
  Commit(0);
  NameRanks(0, size_, 0);
}

void Timeline::NameRanks(int from, int to, int64_t ts_ns) {
  for (int rank = from; rank < to && writable(); ++rank) {
    event_.clear();
    AppendName(&event_, "process_name", RankPid(rank), 0, absl::StrCat("rank ", rank));
    AppendSortIndex(&event_, "process_sort_index", RankPid(rank), 0, rank + 1);
    Commit(ts_ns);
  }
}

void Timeline::MembershipChange(absl::Time at, const std::string& reason, int size) {
  if (!writable()) return;
  const int64_t ts = Since(at);
  event_.clear();
  BeginEvent(&event_, "membership change", "elastic", "i", kNegotiationPid, 0, ts);
  event_.append(",\"s\":\"g\",\"args\":{\"reason\":");
  AppendJsonString(&event_, reason);
  absl::StrAppend(&event_, ",\"size\":", size, "}}");
  Commit(ts);
  if (size > size_) {
    NameRanks(size_, size, ts);
    size_ = size;
    lanes_.resize(size);
  }
}

void Timeline::Negotiation(const std::string& tensor, std::string_view op, absl::Time first_arrival,
                           absl::Time ready, const std::vector<absl::Time>& arrivals_by_rank,
                           bool cached) {
  if (!writable()) return;
  event_.clear();
  const int tid = TensorTid(tensor);
  const int64_t start = Since(first_arrival);
  const int64_t end = std::max(start, Since(ready));
  int known = 0;
  int last_rank = -1;
  for (size_t r = 0; r < arrivals_by_rank.size(); ++r) {
    if (!Known(arrivals_by_rank[r])) continue;
    ++known;
    if (last_rank < 0 || arrivals_by_rank[r] > arrivals_by_rank[last_rank]) {
      last_rank = static_cast<int>(r);
    }
  }
  BeginEvent(&event_, tensor, "negotiation", "X", kNegotiationPid, tid, start);
  event_.append(",\"dur\":");
  AppendMicros(&event_, end - start);
  event_.append(",\"args\":{\"op\":");
  AppendJsonString(&event_, op);
  absl::StrAppend(&event_, ",\"cached\":", cached ? "true" : "false", ",\"ranks\":", known,
                  ",\"last_rank\":", last_rank, "}}");
  for (size_t r = 0; r < arrivals_by_rank.size(); ++r) {
    if (!Known(arrivals_by_rank[r])) continue;
    BeginEvent(&event_, "arrive", "negotiation", "i", kNegotiationPid, tid,
               Since(arrivals_by_rank[r]));
    absl::StrAppend(&event_, ",\"s\":\"t\",\"args\":{\"rank\":", r, "}}");
  }
  Commit(start);
}

void Timeline::RankPhase(int rank, PhaseKind phase, absl::Time start, absl::Time end,
                         const std::vector<std::string>& tensors) {
  if (!writable() || rank < 0 || rank >= size_) return;
  event_.clear();
  const int64_t start_ns = Since(start);
  const int64_t end_ns = std::max(start_ns, Since(end));
  const int tid = PhaseTid(rank, phase, start_ns, end_ns);
  BeginEvent(&event_, ExecPhaseName(phase), "exec", "X", RankPid(rank), tid, start_ns);
  event_.append(",\"dur\":");
  AppendMicros(&event_, end_ns - start_ns);
  event_.append(",\"args\":{\"tensors\":");
  AppendJsonString(&event_, JoinTensors(tensors));
  absl::StrAppend(&event_, ",\"count\":", tensors.size(), "}}");
  Commit(start_ns);
}

absl::Status Timeline::Close() {
  if (file_ == nullptr) return status_;
  if (status_.ok()) Write(kFooter);
  if (std::fflush(file_) != 0 && status_.ok()) status_ = FileError(errno, "cannot write", path_);
  if (std::fclose(file_) != 0 && status_.ok()) status_ = FileError(errno, "cannot close", path_);
  file_ = nullptr;
  return status_;
}

int64_t Timeline::Since(absl::Time t) const {
  return std::max<int64_t>(0, absl::ToInt64Nanoseconds(t - origin_));
}

int Timeline::TensorTid(const std::string& tensor) {
  if (auto it = tensor_tids_.find(tensor); it != tensor_tids_.end()) return it->second;
  // Bounded by the cap: every new name writes its thread_name event.
  const int tid = static_cast<int>(tensor_tids_.size()) + 1;
  tensor_tids_.emplace(tensor, tid);
  AppendName(&event_, "thread_name", kNegotiationPid, tid, tensor);
  AppendSortIndex(&event_, "thread_sort_index", kNegotiationPid, tid, tid);
  return tid;
}

int Timeline::PhaseTid(int rank, PhaseKind phase, int64_t start_ns, int64_t end_ns) {
  // Complete events on one thread must nest; responses queued behind each other overlap, so
  // an overlapping phase goes to the first lane free at its start.
  const int p = static_cast<int>(phase);
  std::vector<int64_t>& lanes = lanes_[rank][p];
  auto lane = std::find_if(lanes.begin(), lanes.end(), [&](int64_t e) { return e <= start_ns; });
  if (lane == lanes.end()) {
    if (static_cast<int>(lanes.size()) < kMaxLanes) {
      lanes.push_back(0);
      const int n = static_cast<int>(lanes.size());
      const int tid = 1 + p * kMaxLanes + n - 1;
      std::string name(ExecPhaseName(phase));
      if (n > 1) absl::StrAppend(&name, " ", n);
      AppendName(&event_, "thread_name", RankPid(rank), tid, name);
      AppendSortIndex(&event_, "thread_sort_index", RankPid(rank), tid, tid);
      lane = lanes.end() - 1;
    } else {
      lane = std::min_element(lanes.begin(), lanes.end());
    }
  }
  *lane = std::max(*lane, end_ns);
  return 1 + p * kMaxLanes + static_cast<int>(lane - lanes.begin());
}

void Timeline::Commit(int64_t ts_ns) {
  if (!writable() || event_.empty()) return;
  std::string_view bytes = event_;
  if (first_event_) bytes.remove_prefix(1);  // no comma before the first event
  if (bytes_written_ + static_cast<int64_t>(bytes.size()) + kReserve <= max_bytes_) {
    Write(bytes);
    first_event_ = false;
    return;
  }
  truncated_ = true;
  TROIKA_LOG(WARNING) << "timeline '" << path_ << "' reached its size cap of " << max_bytes_
                      << " bytes; later events are dropped";
  event_.clear();
  BeginEvent(&event_, kTruncatedName, "timeline", "i", kNegotiationPid, 0, ts_ns);
  absl::StrAppend(&event_, ",\"s\":\"g\",\"args\":{\"max_bytes\":", max_bytes_, "}}");
  bytes = event_;
  if (first_event_) bytes.remove_prefix(1);
  Write(bytes);
  first_event_ = false;
}

void Timeline::Write(std::string_view bytes) {
  if (file_ == nullptr || !status_.ok()) return;
  const size_t n = std::fwrite(bytes.data(), 1, bytes.size(), file_);
  bytes_written_ += static_cast<int64_t>(n);
  if (n != bytes.size()) status_ = FileError(errno, "cannot write", path_);
}

}  // namespace troika::coordinator
