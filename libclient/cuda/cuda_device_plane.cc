// The GPU device plane: NCCL communicators per process set, a stream-ordered device fusion
// buffer packed and unpacked by the batched copy kernels; a Finisher completes operations when
// their CUDA event fires (docs/gpu.md).

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "libclient/cuda/copy_kernels.h"
#include "libclient/cuda/cuda_status.h"
#include "libclient/cuda/finisher.h"
#include "libclient/cuda/nccl_comm.h"
#include "libclient/cuda/nccl_library.h"
#include "libclient/cuda/nccl_types.h"
#include "libclient/execution/device_plane.h"

namespace troika::internal {
namespace {

using cuda::CopyItem;
using cuda::CopyTransform;
using cuda::CudaError;
using cuda::Event;
using cuda::Finisher;
using cuda::NcclComm;
using cuda::NcclLibrary;
using cuda::NcclType;
using cuda::Reduction;
using cuda::ReductionOf;
using cuda::WireType;

size_t Elements(const TensorRequest& r) { return static_cast<size_t>(NumElements(r.shape)); }

uint8_t* At(const void* base, size_t offset) {
  return static_cast<uint8_t*>(const_cast<void*>(base)) + offset;
}

class CudaDevicePlane final : public DevicePlane {
 public:
  explicit CudaDevicePlane(DevicePlaneOptions options)
      : options_(std::move(options)), finisher_(aborted_, comms_mu_, options_.on_failure) {}
  ~CudaDevicePlane() override { Stop(); }

  absl::Status CheckDevice(int ordinal) override {
    int count = 0;
    if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
      return absl::FailedPreconditionError(
          absl::StrCat("no usable CUDA device in this process: ", cudaGetErrorString(e)));
    }
    if (ordinal >= count) {
      return absl::FailedPreconditionError(
          absl::StrCat("GPU ", ordinal, " does not exist (this process sees ", count, ")"));
    }
    return LoadNccl();
  }

  absl::StatusOr<std::shared_ptr<void>> MarkStream(int ordinal, void* stream) override;
  absl::Status Launch(const Response& response, const DeviceGroup& group,
                      std::vector<Entry>& entries) override;
  void DropGroup(int set) override;
  void Abort() override;
  void Stop() override;

 private:
  // Loads NCCL, once, at the first GPU operation (never when libtroika is loaded: a framework
  // imported later must find its own NCCL, docs/gpu.md); a failure stays, and every GPU
  // operation reports it. Any thread.
  absl::Status LoadNccl();
  // Executor thread: the device and stream made, and the finisher started, at the first
  // operation.
  absl::Status Prepare(const std::vector<Entry>& entries);
  absl::StatusOr<NcclComm*> Comm(const DeviceGroup& group);
  // Makes the stream wait for what produced the entries' inputs.
  absl::Status WaitForInputs(const std::vector<Entry>& entries);
  uint8_t* Reserve(size_t bytes, absl::Status* status);
  absl::StatusOr<std::shared_ptr<uint8_t>> Allocate(size_t bytes);
  // Where `e`'s `bytes`-byte result goes, taken by its handle: the caller's buffer if it gave
  // one and it is large enough, else new device memory (a caller's buffer that is too small
  // sets e.outcome: the rank takes part and discards the result).
  absl::StatusOr<uint8_t*> Result(Entry& e, size_t bytes, const std::vector<int64_t>& shape);
  absl::Status Copy(const std::vector<CopyItem>& items, const CopyTransform& transform);
  absl::Status Nccl(ncclResult_t result, const std::string& what) {
    return comm_->Settle(result, what, aborted_);
  }

  absl::Status Allreduce(const Response& r, std::vector<Entry>& entries);
  absl::Status Allgather(const Response& r, Entry& e);
  absl::Status Broadcast(const Response& r, Entry& e);
  absl::Status Alltoall(const Response& r, Entry& e);
  absl::Status Reducescatter(const Response& r, Entry& e);

  const DevicePlaneOptions options_;
  std::atomic<bool> aborted_{false};

  // Set once by LoadNccl (std::call_once), constant afterwards; read only after LoadNccl.
  std::once_flag nccl_once_;
  absl::StatusOr<NcclLibrary> nccl_{absl::UnknownError("NCCL is not loaded yet")};

  // Executor thread only.
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
  uint8_t* fusion_ = nullptr;  // stream-ordered allocation; grows, never shrinks
  size_t fusion_capacity_ = 0;
  int generation_ = 0;        // of communicators: a rebuilt one bootstraps under a new key
  NcclComm* comm_ = nullptr;  // during one Launch
  DeviceGroup group_;         // during one Launch
  // During one Launch: results received for a caller whose buffer was too small (Result).
  std::vector<std::shared_ptr<uint8_t>> discarded_;

  std::mutex comms_mu_;
  std::map<int, std::unique_ptr<NcclComm>> comms_;  // by process set; guarded by comms_mu_
  std::vector<std::unique_ptr<NcclComm>> retired_;  // dropped sets'; guarded by comms_mu_

  Finisher finisher_;  // after what it refers to
};

absl::Status CudaDevicePlane::LoadNccl() {
  std::call_once(nccl_once_, [this] {
    nccl_ = NcclLibrary::Load({.path = options_.nccl_library});
    if (nccl_.ok()) {
      TROIKA_LOG(INFO) << "GPU data plane: NCCL " << cuda::NcclVersionString(nccl_->version)
                       << " from " << nccl_->path << " (" << nccl_->origin << ")";
    }
  });
  return nccl_.status();
}

absl::Status CudaDevicePlane::Prepare(const std::vector<Entry>& entries) {
  if (device_ < 0) {
    for (const Entry& e : entries) {
      if (e.device >= 0) device_ = e.device;
    }
    // Only joined-rank stand-ins: the device this thread uses.
    if (device_ < 0) TROIKA_CUDA_RETURN(cudaGetDevice(&device_), "cudaGetDevice");
  }
  TROIKA_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
  if (stream_ == nullptr) {
    TROIKA_CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                       "creating Troika's CUDA stream");
    finisher_.Start(device_);
  }
  return absl::OkStatus();
}

absl::StatusOr<NcclComm*> CudaDevicePlane::Comm(const DeviceGroup& group) {
  {
    std::lock_guard<std::mutex> lock(comms_mu_);
    auto it = comms_.find(group.set);
    if (it != comms_.end()) return it->second.get();
  }
  // Every rank of the group reaches its first GPU response of the set at the same point of
  // the response order, so they all create the communicator together.
  const std::string key =
      absl::StrCat(options_.store_prefix, "ps", group.set, "/g", generation_++, "/nccl_id");
  auto comm = NcclComm::Create(*nccl_, *options_.store, key, group.rank, group.size,
                               options_.timeout, aborted_);
  if (!comm.ok()) return comm.status();
  std::lock_guard<std::mutex> lock(comms_mu_);
  if (aborted_.load()) return absl::CancelledError("the GPU data plane was aborted");
  NcclComm* raw = comm->get();
  comms_[group.set] = *std::move(comm);
  return raw;
}

absl::StatusOr<std::shared_ptr<void>> CudaDevicePlane::MarkStream(int ordinal, void* stream) {
  // The event must be made on the stream's device. Switching this thread's device and back
  // could make a context on the device it had (cudaSetDevice does since CUDA 12) — memory on
  // a GPU this rank does not use — so a thread on another device is not marked.
  int current = -1;
  TROIKA_CUDA_RETURN(cudaGetDevice(&current), "cudaGetDevice");
  if (current != ordinal) return nullptr;
  auto mark = std::make_shared<Event>();
  TROIKA_CUDA_RETURN(cudaEventCreateWithFlags(&mark->event, cudaEventDisableTiming),
                     "cudaEventCreate");
  TROIKA_CUDA_RETURN(cudaEventRecord(mark->event, static_cast<cudaStream_t>(stream)),
                     "marking the input's ready stream");
  return std::shared_ptr<void>(mark, mark->event);  // the event, owned by `mark`
}

absl::Status CudaDevicePlane::WaitForInputs(const std::vector<Entry>& entries) {
  for (const Entry& e : entries) {
    if (e.ready != nullptr) {
      TROIKA_CUDA_RETURN(cudaStreamWaitEvent(stream_, static_cast<cudaEvent_t>(e.ready.get())),
                         "waiting for the input's producer");
    } else if (e.ready_stream != nullptr) {
      // Not marked at submission (MarkStream): what is queued on the stream by now.
      Event ready;
      TROIKA_CUDA_RETURN(cudaEventCreateWithFlags(&ready.event, cudaEventDisableTiming),
                         "cudaEventCreate");
      TROIKA_CUDA_RETURN(cudaEventRecord(ready.event, static_cast<cudaStream_t>(e.ready_stream)),
                         "recording on the input's ready stream");
      TROIKA_CUDA_RETURN(cudaStreamWaitEvent(stream_, ready.event),
                         "waiting for the input's ready stream");
    }
  }
  return absl::OkStatus();
}

uint8_t* CudaDevicePlane::Reserve(size_t bytes, absl::Status* status) {
  if (bytes <= fusion_capacity_) return fusion_;
  // Stream-ordered: the old buffer is freed after the operations queued before that use it.
  const size_t capacity = std::max(bytes, fusion_capacity_ * 3 / 2);
  if (fusion_ != nullptr) cudaFreeAsync(fusion_, stream_);
  fusion_ = nullptr;
  fusion_capacity_ = 0;
  void* p = nullptr;
  if (cudaError_t e = cudaMallocAsync(&p, capacity, stream_); e != cudaSuccess) {
    *status = CudaError(e, absl::StrCat("allocating a ", capacity, "-byte fusion buffer"));
    return nullptr;
  }
  fusion_ = static_cast<uint8_t*>(p);
  fusion_capacity_ = capacity;
  return fusion_;
}

absl::StatusOr<uint8_t*> CudaDevicePlane::Result(Entry& e, size_t bytes,
                                                 const std::vector<int64_t>& shape) {
  if (e.caller_output && bytes <= e.out_bytes) {
    // Not owned: an aliasing pointer with no owner.
    return e.state->SetOutput(
        std::shared_ptr<uint8_t>(std::shared_ptr<uint8_t>(), static_cast<uint8_t*>(e.out)), bytes);
  }
  auto out = Allocate(bytes);
  if (!out.ok()) return out.status();
  if (e.caller_output && !e.owned_if_too_small) {
    // Received into scratch space that lives until the operation completes; output() stays
    // null.
    discarded_.push_back(*out);
    e.outcome = absl::OutOfRangeError(
        absl::StrCat(CollectiveName(e.request.type), " '", e.request.name, "' on rank ",
                     e.request.rank, ": the result needs ", bytes, " bytes (shape ",
                     ShapeString(shape), "), but the caller's output buffer holds ", e.out_bytes,
                     "; this rank took part in the collective and discarded its result"));
    return out->get();
  }
  return e.state->SetOutput(*std::move(out), bytes);
}

absl::StatusOr<std::shared_ptr<uint8_t>> CudaDevicePlane::Allocate(size_t bytes) {
  void* p = nullptr;
  TROIKA_CUDA_RETURN(cudaMalloc(&p, std::max<size_t>(bytes, 1)),
                     absl::StrCat("allocating a ", bytes, "-byte result"));
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { cudaFree(q); });
}

absl::Status CudaDevicePlane::Copy(const std::vector<CopyItem>& items,
                                   const CopyTransform& transform) {
  TROIKA_CUDA_RETURN(
      cuda::BatchedCopy(items.data(), static_cast<int>(items.size()), transform, stream_),
      "launching the batched copy kernel");
  return absl::OkStatus();
}

absl::Status CudaDevicePlane::Launch(const Response& response, const DeviceGroup& group,
                                     std::vector<Entry>& entries) {
  if (aborted_.load()) return absl::CancelledError("the GPU data plane was aborted");
  if (absl::Status s = LoadNccl(); !s.ok()) return s;
  if (absl::Status s = Prepare(entries); !s.ok()) return s;
  absl::StatusOr<NcclComm*> comm = Comm(group);
  if (!comm.ok()) return comm.status();
  comm_ = *comm;
  discarded_.clear();
  group_ = group;
  if (absl::Status s = WaitForInputs(entries); !s.ok()) return s;
  absl::Status status;
  switch (response.type) {
    case CollectiveType::kAllreduce:
      status = Allreduce(response, entries);
      break;
    case CollectiveType::kAllgather:
      status = Allgather(response, entries[0]);
      break;
    case CollectiveType::kBroadcast:
      status = Broadcast(response, entries[0]);
      break;
    case CollectiveType::kAlltoall:
      status = Alltoall(response, entries[0]);
      break;
    case CollectiveType::kReducescatter:
      status = Reducescatter(response, entries[0]);
      break;
    default:
      status = absl::InternalError(
          absl::StrCat(CollectiveName(response.type), " is not a GPU operation"));
  }
  if (!status.ok()) return status;
  auto done = std::make_shared<Event>();
  TROIKA_CUDA_RETURN(cudaEventCreateWithFlags(&done->event, cudaEventDisableTiming),
                     "cudaEventCreate");
  TROIKA_CUDA_RETURN(cudaEventRecord(done->event, stream_), "recording the completion event");
  Finisher::Op op{done, {}, {}, std::move(discarded_), comm_};
  discarded_.clear();
  for (Entry& e : entries) {
    if (!e.state) continue;  // a joined rank's stand-in
    {
      std::lock_guard<std::mutex> lock(e.state->mu);
      e.state->stream_waiter = [done](void* stream) {
        cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), done->event);
      };
    }
    e.state->cv.notify_all();
    op.states.push_back(e.state);
    op.outcomes.push_back(e.outcome);
  }
  finisher_.Push(std::move(op));
  return absl::OkStatus();
}

absl::Status CudaDevicePlane::Allreduce(const Response& r, std::vector<Entry>& entries) {
  const DataType wire = WireType(r);
  const Reduction reduction = ReductionOf(r, group_.size);
  const bool finish = reduction.divisor > 1 || r.postscale != 1.0;
  if (entries.size() == 1 && entries[0].out != nullptr && wire == r.dtype) {
    // One tensor: reduce in the caller's output, no fusion copy.
    Entry& e = entries[0];
    const size_t count = Elements(e.request);
    const size_t bytes = count * DataTypeSize(r.dtype);
    if (e.out != e.in && bytes > 0) {
      TROIKA_CUDA_RETURN(cudaMemcpyAsync(e.out, e.in, bytes, cudaMemcpyDeviceToDevice, stream_),
                         "copying the input to the output");
    }
    if (r.prescale != 1.0) {
      if (absl::Status s = Copy({{e.out, e.out, count}}, {r.dtype, r.dtype, r.prescale, 1});
          !s.ok()) {
        return s;
      }
    }
    if (absl::Status s = Nccl(nccl_->AllReduce(e.out, e.out, count, NcclType(r.dtype), reduction.op,
                                               comm_->get(), stream_),
                              "ncclAllReduce");
        !s.ok()) {
      return s;
    }
    if (!finish) return absl::OkStatus();
    return Copy({{e.out, e.out, count}}, {r.dtype, r.dtype, r.postscale, reduction.divisor});
  }
  const size_t wire_size = DataTypeSize(wire);
  size_t total = 0;
  for (const Entry& e : entries) total += Elements(e.request);
  absl::Status status;
  uint8_t* buffer = Reserve(total * wire_size, &status);
  if (buffer == nullptr && total > 0) return status;
  std::vector<CopyItem> pack, unpack;
  size_t offset = 0;
  for (const Entry& e : entries) {
    const size_t count = Elements(e.request);
    pack.push_back({e.in, buffer + offset * wire_size, count});  // no input: zeros
    if (e.out != nullptr) unpack.push_back({buffer + offset * wire_size, e.out, count});
    offset += count;
  }
  if (absl::Status s = Copy(pack, {r.dtype, wire, r.prescale, 1}); !s.ok()) return s;
  if (absl::Status s = Nccl(nccl_->AllReduce(buffer, buffer, total, NcclType(wire), reduction.op,
                                             comm_->get(), stream_),
                            "ncclAllReduce");
      !s.ok()) {
    return s;
  }
  return Copy(unpack, {wire, r.dtype, r.postscale, reduction.divisor});
}

absl::Status CudaDevicePlane::Allgather(const Response& r, Entry& e) {
  const size_t row = static_cast<size_t>(e.request.RowBytes());
  std::vector<size_t> offsets(group_.size + 1, 0);
  for (int q = 0; q < group_.size; ++q) {
    offsets[q + 1] = offsets[q] + static_cast<size_t>(r.sizes[q]) * row;
  }
  int64_t rows = 0;
  for (int q = 0; q < group_.size; ++q) rows += r.sizes[q];
  e.state->output_shape = WithDim0(e.request.shape, rows);
  absl::StatusOr<uint8_t*> out = Result(e, offsets.back(), e.state->output_shape);
  if (!out.ok()) return out.status();
  uint8_t* data = *out;
  // Variable blocks: one broadcast per rank, grouped into a single NCCL launch.
  nccl_->GroupStart();
  for (int q = 0; q < group_.size; ++q) {
    nccl_->Broadcast(q == group_.rank ? e.in : nullptr, data + offsets[q],
                     offsets[q + 1] - offsets[q], ncclInt8, q, comm_->get(), stream_);
  }
  return Nccl(nccl_->GroupEnd(), "allgather (grouped ncclBroadcast)");
}

absl::Status CudaDevicePlane::Broadcast(const Response& r, Entry& e) {
  const size_t bytes = Elements(e.request) * DataTypeSize(r.dtype);
  absl::Status status;
  // A joined rank (never the root) receives into scratch space and discards it.
  void* out = e.out != nullptr ? e.out : Reserve(bytes, &status);
  if (out == nullptr && bytes > 0) return status;
  return Nccl(nccl_->Broadcast(e.in, out, bytes, ncclInt8, r.root, comm_->get(), stream_),
              "ncclBroadcast");
}

absl::Status CudaDevicePlane::Alltoall(const Response& r, Entry& e) {
  const int size = group_.size, rank = group_.rank;
  const size_t row = static_cast<size_t>(e.request.RowBytes());
  std::vector<size_t> send(size), recv(size), send_at(size), recv_at(size);
  size_t sent = 0, received = 0;
  e.state->received_splits.resize(size);
  for (int j = 0; j < size; ++j) {
    send[j] = static_cast<size_t>(r.splits[rank * size + j]) * row;
    recv[j] = static_cast<size_t>(r.splits[j * size + rank]) * row;
    e.state->received_splits[j] = r.splits[j * size + rank];
    send_at[j] = sent;
    recv_at[j] = received;
    sent += send[j];
    received += recv[j];
  }
  int64_t rows = 0;
  for (int64_t n : e.state->received_splits) rows += n;
  e.state->output_shape = WithDim0(e.request.shape, rows);
  absl::StatusOr<uint8_t*> out = Result(e, received, e.state->output_shape);
  if (!out.ok()) return out.status();
  uint8_t* data = *out;
  nccl_->GroupStart();
  for (int j = 0; j < size; ++j) {
    if (send[j] > 0) nccl_->Send(At(e.in, send_at[j]), send[j], ncclInt8, j, comm_->get(), stream_);
    if (recv[j] > 0) nccl_->Recv(data + recv_at[j], recv[j], ncclInt8, j, comm_->get(), stream_);
  }
  return Nccl(nccl_->GroupEnd(), "alltoall (grouped ncclSend/ncclRecv)");
}

absl::Status CudaDevicePlane::Reducescatter(const Response& r, Entry& e) {
  const int size = group_.size, rank = group_.rank;
  const size_t tensor_element = DataTypeSize(r.dtype);
  const size_t row_elements =
      tensor_element == 0 ? 0 : static_cast<size_t>(e.request.RowBytes()) / tensor_element;
  // Staged and reduced in the wire type (int32 for int16 and uint16).
  const DataType wire = WireType(r);
  const size_t element = DataTypeSize(wire);
  const size_t count = Elements(e.request);
  const Reduction reduction = ReductionOf(r, size);
  std::vector<size_t> counts(size), at(size);
  size_t before = 0;
  bool even = true;
  for (int q = 0; q < size; ++q) {
    counts[q] = static_cast<size_t>(r.sizes[q]) * row_elements;
    at[q] = before;
    before += counts[q];
    even = even && counts[q] == counts[0];
  }
  // The caller's input is const and the reduction in place: stage it, pre-scaled.
  absl::Status status;
  uint8_t* buffer = Reserve(count * element, &status);
  if (buffer == nullptr && count > 0) return status;
  if (absl::Status s = Copy({{e.in, buffer, count}}, {r.dtype, wire, r.prescale, 1}); !s.ok()) {
    return s;
  }
  uint8_t* mine = buffer + at[rank] * element;
  if (even) {
    if (absl::Status s = Nccl(nccl_->ReduceScatter(buffer, mine, counts[0], NcclType(wire),
                                                   reduction.op, comm_->get(), stream_),
                              "ncclReduceScatter");
        !s.ok()) {
      return s;
    }
  } else {
    // Uneven blocks (the first dim0 % size ranks get a row more): one reduce per block.
    nccl_->GroupStart();
    for (int q = 0; q < size; ++q) {
      nccl_->Reduce(buffer + at[q] * element, buffer + at[q] * element, counts[q], NcclType(wire),
                    reduction.op, q, comm_->get(), stream_);
    }
    if (absl::Status s = Nccl(nccl_->GroupEnd(), "reducescatter (grouped ncclReduce)"); !s.ok()) {
      return s;
    }
  }
  e.state->output_shape = WithDim0(e.request.shape, r.sizes[rank]);
  absl::StatusOr<uint8_t*> out = Result(e, counts[rank] * tensor_element, e.state->output_shape);
  if (!out.ok()) return out.status();
  uint8_t* data = *out;
  return Copy({{mine, data, counts[rank]}}, {wire, r.dtype, r.postscale, reduction.divisor});
}

void CudaDevicePlane::DropGroup(int set) {
  std::lock_guard<std::mutex> lock(comms_mu_);
  auto it = comms_.find(set);
  if (it == comms_.end()) return;
  // The finisher may still poll it for the set's last operations: released at Stop().
  retired_.push_back(std::move(it->second));
  comms_.erase(it);
}

void CudaDevicePlane::Abort() {
  aborted_.store(true);
  std::lock_guard<std::mutex> lock(comms_mu_);
  for (auto& [set, comm] : comms_) comm->Abort();
}

void CudaDevicePlane::Stop() {
  finisher_.Stop();  // it may still ask the communicators for errors
  {
    std::lock_guard<std::mutex> lock(comms_mu_);
    comms_.clear();
    retired_.clear();
  }
  if (stream_ != nullptr) {
    if (fusion_ != nullptr) cudaFreeAsync(fusion_, stream_);
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<DevicePlane>> CreateDevicePlane(DevicePlaneOptions options) {
  return std::make_unique<CudaDevicePlane>(std::move(options));
}

}  // namespace troika::internal
