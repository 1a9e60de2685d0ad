#include "libclient/execution/collective_runner.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "libclient/transport/reduce.h"

namespace troika::internal {
namespace {

// Averaging is a sum followed by a 1/size post-scale.
ReduceOp WireOp(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

// The post-reduction step, on `count` elements of `dtype` (the accumulation type): averaging
// over the set's size (as Horovod: joined ranks count, adding zeros), then the post-scale.
void Finish(const Response& r, DataType dtype, int size, void* data, size_t count) {
  if (r.reduce_op == ReduceOp::kAverage) transport::Divide(data, count, dtype, size);
  transport::Scale(data, count, dtype, r.postscale);
}

size_t Bytes(const TensorRequest& r) { return static_cast<size_t>(r.ByteSize()); }
size_t Elements(const TensorRequest& r) { return static_cast<size_t>(NumElements(r.shape)); }

// Vote elements: "go" is the value that leaves the op's result unchanged by a go, so any void
// shows in the combined value — 0 for sum and max (void: 1), 1 for min and product (void: 0).
// A sum of 8-bit elements takes one element per 127 ranks (rank r votes in r / 127), so no
// count of voids wraps to 0.
bool GoIsOne(ReduceOp op) { return op == ReduceOp::kMin || op == ReduceOp::kProduct; }

size_t VoteElements(size_t width, ReduceOp op, int size) {
  if (width == 1 && op == ReduceOp::kSum) return static_cast<size_t>(size + 126) / 127;
  return 1;
}

// Writes 0 or 1 of `dtype` (`width` bytes) at `p`.
void WriteZeroOrOne(uint8_t* p, DataType dtype, size_t width, bool one) {
  std::memset(p, 0, width);
  if (!one) return;
  auto put = [p](auto value) { std::memcpy(p, &value, sizeof(value)); };
  switch (dtype) {
    case DataType::kFloat16:
      return put(uint16_t{0x3C00});
    case DataType::kBFloat16:
      return put(uint16_t{0x3F80});
    case DataType::kFloat32:
      return put(1.0f);
    case DataType::kFloat64:
      return put(1.0);
    case DataType::kInt16:
    case DataType::kUint16:
      return put(uint16_t{1});
    case DataType::kInt32:
      return put(int32_t{1});
    case DataType::kInt64:
      return put(int64_t{1});
    default:  // 8-bit integers, bool
      return put(uint8_t{1});
  }
}

}  // namespace

uint8_t* CollectiveRunner::Result(Entry& e, size_t bytes, const std::vector<int64_t>& shape,
                                  std::shared_ptr<uint8_t>* scratch) {
  if (!e.caller_output) return Output(e, bytes);
  if (bytes <= e.out_bytes) {
    // Not owned: an aliasing pointer with no owner.
    return e.state->SetOutput(
        std::shared_ptr<uint8_t>(std::shared_ptr<uint8_t>(), static_cast<uint8_t*>(e.out)), bytes);
  }
  if (e.owned_if_too_small) return Output(e, bytes);  // as the handle-owned form
  e.outcome = absl::OutOfRangeError(
      absl::StrCat(CollectiveName(e.request.type), " '", e.request.name, "' on rank ",
                   e.request.rank, ": the result needs ", bytes, " bytes (shape ",
                   ShapeString(shape), "), but the caller's output buffer holds ", e.out_bytes,
                   "; this rank took part in the collective and discarded its result"));
  if (scratch == nullptr) return nullptr;
  *scratch = outputs_.Acquire(bytes);
  return scratch->get();
}

absl::Status CollectiveRunner::Run(transport::Communicator& comm, const Response& response,
                                   absl::Span<Entry> entries, Vote* vote) {
  comm_ = &comm;
  if (vote != nullptr && response.type != CollectiveType::kAllreduce) {
    return absl::InternalError("only allreduces are scheduled");
  }
  switch (response.type) {
    case CollectiveType::kAllreduce:
      return Allreduce(response, entries, vote);
    case CollectiveType::kAllgather:
      return Allgather(response, entries[0]);
    case CollectiveType::kBroadcast:
      return Broadcast(response, entries[0]);
    case CollectiveType::kAlltoall:
      return Alltoall(response, entries[0]);
    case CollectiveType::kReducescatter:
      return Reducescatter(response, entries[0]);
    case CollectiveType::kBarrier:
      return comm_->Barrier();
    case CollectiveType::kJoin:
      // Every rank has joined; nothing moves on the data plane.
      entries[0].state->joined_last_rank = response.root;
      return absl::OkStatus();
  }
  return absl::InternalError("unknown collective type in response");
}

absl::Status CollectiveRunner::CombineVotes(transport::Communicator& comm, Vote* vote) {
  int32_t combined = *vote == Vote::kVoid ? 1 : 0;
  if (absl::Status s = comm.Allreduce(&combined, 1, DataType::kInt32, ReduceOp::kMax); !s.ok()) {
    return s;
  }
  *vote = combined != 0 ? Vote::kVoid : Vote::kGo;
  return absl::OkStatus();
}

absl::Status CollectiveRunner::Allreduce(const Response& response, absl::Span<Entry> entries,
                                         Vote* vote) {
  const DataType dtype = response.dtype;
  // Half types are reduced in float32 (transport::AccumulationType): staged, reduced and
  // finished wide in the fusion buffer, and rounded once into the outputs.
  const DataType wide = transport::AccumulationType(dtype, response.reduce_op);
  const size_t element = DataTypeSize(dtype), wide_element = DataTypeSize(wide);
  const ReduceOp op = WireOp(response.reduce_op);
  // Each entry's element count (a request's dtype is its response's).
  size_t elements = 0;
  for (const Entry& e : entries) elements += Elements(e.request);
  const size_t total = elements * element;
  const bool inline_vote = total <= kInlineVoteBytes;
  if (!inline_vote && vote != nullptr) {
    if (absl::Status s = CombineVotes(*comm_, vote); !s.ok()) return s;
    if (*vote == Vote::kVoid) return absl::OkStatus();
  }
  if (!inline_vote && entries.size() == 1 && entries[0].out != nullptr && wide == dtype) {
    // One tensor: reduce in the caller's output buffer, no fusion copy.
    Entry& e = entries[0];
    // Unscaled, the data plane reads the input and writes the output itself (no copy first
    // where it can: shared memory); a prescale is applied to a copy in the output.
    const void* from = e.in;
    if (response.prescale != 1.0) {
      transport::Convert(e.in, dtype, e.out, dtype, elements, response.prescale);
      from = e.out;
    }
    marks_.copied_in = Mark();
    if (absl::Status s = comm_->AllreduceInto(from, e.out, elements, dtype, op); !s.ok()) {
      return s;
    }
    marks_.reduced = Mark();
    marks_.allreduce_bytes = static_cast<int64_t>(total);
    Finish(response, dtype, comm_->size(), e.out, elements);
    return absl::OkStatus();
  }
  const size_t votes = inline_vote ? VoteElements(wide_element, op, comm_->size()) : 0;
  uint8_t* buffer = fusion_.Reserve((elements + votes) * wide_element);
  uint8_t* at = buffer;
  for (const Entry& e : entries) {
    const size_t count = Elements(e.request);
    if (count > 0 && e.in == nullptr) {
      std::memset(at, 0, count * wide_element);  // a joined rank's stand-in
    } else {
      transport::Convert(e.in, dtype, at, wide, count, response.prescale);
    }
    at += count * wide_element;
  }
  uint8_t* ballot = buffer + elements * wide_element;
  for (size_t i = 0; i < votes; ++i) {
    const bool mine = vote != nullptr && *vote == Vote::kVoid &&
                      i == static_cast<size_t>(comm_->rank()) / 127 % votes;
    WriteZeroOrOne(ballot + i * wide_element, wide, wide_element, GoIsOne(op) != mine);
  }
  marks_.copied_in = Mark();
  if (absl::Status s = comm_->Allreduce(buffer, elements + votes, wide, op); !s.ok()) {
    return s;
  }
  marks_.reduced = Mark();
  marks_.allreduce_bytes = static_cast<int64_t>(total);
  if (vote != nullptr && votes > 0) {
    uint8_t go[8];
    WriteZeroOrOne(go, wide, wide_element, GoIsOne(op));
    *vote = Vote::kGo;
    for (size_t i = 0; i < votes; ++i) {
      if (std::memcmp(ballot + i * wide_element, go, wide_element) != 0) *vote = Vote::kVoid;
    }
    if (*vote == Vote::kVoid) return absl::OkStatus();
  }
  at = buffer;
  for (Entry& e : entries) {
    const size_t count = Elements(e.request);
    Finish(response, wide, comm_->size(), at, count);
    if (e.out != nullptr) transport::Convert(at, wide, e.out, dtype, count);
    at += count * wide_element;
  }
  return absl::OkStatus();
}

absl::Status CollectiveRunner::Allgather(const Response& response, Entry& e) {
  const size_t row = static_cast<size_t>(e.request.RowBytes());
  std::vector<size_t> recv(response.sizes.size());
  int64_t rows = 0;
  for (size_t r = 0; r < recv.size(); ++r) {
    recv[r] = static_cast<size_t>(response.sizes[r]) * row;
    rows += response.sizes[r];
  }
  e.state->output_shape = WithDim0(e.request.shape, rows);
  std::shared_ptr<uint8_t> scratch;
  uint8_t* out = Result(e, static_cast<size_t>(rows) * row, e.state->output_shape, &scratch);
  return comm_->Allgatherv(e.in, out, recv);
}

absl::Status CollectiveRunner::Broadcast(const Response& response, Entry& e) {
  const size_t bytes = Bytes(e.request);
  if (comm_->rank() == response.root && e.out != e.in && bytes > 0) {
    std::memcpy(e.out, e.in, bytes);
  }
  // A stand-in with no output (Executor::JoinedStandIn; never the root) receives into
  // scratch space and discards it.
  void* out = e.out != nullptr ? e.out : fusion_.Reserve(bytes);
  return comm_->Broadcast(out, bytes, response.root);
}

absl::Status CollectiveRunner::Alltoall(const Response& response, Entry& e) {
  const int size = comm_->size(), rank = comm_->rank();
  const size_t row = static_cast<size_t>(e.request.RowBytes());
  std::vector<size_t> send(size), recv(size);
  int64_t rows = 0;
  e.state->received_splits.resize(size);
  for (int j = 0; j < size; ++j) {
    send[j] = static_cast<size_t>(response.splits[rank * size + j]) * row;
    int64_t from_j = response.splits[j * size + rank];
    recv[j] = static_cast<size_t>(from_j) * row;
    e.state->received_splits[j] = from_j;
    rows += from_j;
  }
  e.state->output_shape = WithDim0(e.request.shape, rows);
  std::shared_ptr<uint8_t> scratch;
  uint8_t* out = Result(e, static_cast<size_t>(rows) * row, e.state->output_shape, &scratch);
  return comm_->Alltoallv(e.in, send, out, recv);
}

absl::Status CollectiveRunner::Reducescatter(const Response& response, Entry& e) {
  const int size = comm_->size(), rank = comm_->rank();
  const DataType dtype = response.dtype;
  const DataType wide = transport::AccumulationType(dtype, response.reduce_op);  // as Allreduce
  const size_t element = DataTypeSize(dtype), wide_element = DataTypeSize(wide);
  const size_t row_elements = static_cast<size_t>(e.request.RowBytes()) / element;
  const size_t elements = Bytes(e.request) / element;
  // The reduction works in place, and the caller's input is const: stage it.
  uint8_t* buffer = fusion_.Reserve(elements * wide_element);
  transport::Convert(e.in, dtype, buffer, wide, elements, response.prescale);
  std::vector<size_t> counts(size);
  size_t before = 0;
  for (int r = 0; r < size; ++r) {
    counts[r] = static_cast<size_t>(response.sizes[r]) * row_elements;
    if (r < rank) before += counts[r];
  }
  if (absl::Status s = comm_->ReduceScatter(buffer, counts, wide, WireOp(response.reduce_op));
      !s.ok()) {
    return s;
  }
  uint8_t* mine = buffer + before * wide_element;
  Finish(response, wide, size, mine, counts[rank]);
  e.state->output_shape = WithDim0(e.request.shape, response.sizes[rank]);
  uint8_t* out = Result(e, counts[rank] * element, e.state->output_shape, nullptr);
  if (out != nullptr) transport::Convert(mine, wide, out, dtype, counts[rank]);
  return absl::OkStatus();
}

}  // namespace troika::internal
