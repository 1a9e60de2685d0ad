// Context's operations: each builds its TensorRequest (process sets, options, groups) and
// hands it to ContextImpl, which checks, places and submits it (context.cc).

#include <utility>

#include "common/request_check.h"
#include "libclient/context_impl.h"
#include "troika/elastic.h"

namespace troika {

using internal::SetReduction;

namespace {

TensorRequest Request(const std::string& name, CollectiveType type, DataType dtype,
                      std::vector<int64_t> shape) {
  TensorRequest r;
  r.name = name;
  r.type = type;
  r.dtype = dtype;
  r.shape = std::move(shape);
  return r;
}

}  // namespace

Handle Context::Allreduce(const std::string& name, const void* in, void* out, DataType dtype,
                          std::vector<int64_t> shape, AllreduceOptions options) {
  if (std::optional<Handle> ran = impl_->AllreduceNow(name, in, out, dtype, shape, options)) {
    return *std::move(ran);
  }
  TensorRequest r = Request(name, CollectiveType::kAllreduce, dtype, std::move(shape));
  SetReduction(r, options);
  r.process_set = options.process_set;
  return impl_->Submit(std::move(r), in, out, options.device, options.compression, std::nullopt,
                       options.wait);
}

Handle Context::Allgather(const std::string& name, const void* in, DataType dtype,
                          std::vector<int64_t> shape, OpOptions options) {
  TensorRequest r = Request(name, CollectiveType::kAllgather, dtype, std::move(shape));
  r.process_set = options.process_set;
  return impl_->Submit(std::move(r), in, nullptr, options.device);
}

Handle Context::Broadcast(const std::string& name, const void* in, void* out, DataType dtype,
                          std::vector<int64_t> shape, int root, OpOptions options) {
  TensorRequest r = Request(name, CollectiveType::kBroadcast, dtype, std::move(shape));
  r.root = root;
  r.process_set = options.process_set;
  return impl_->Submit(std::move(r), in, out, options.device);
}

Handle Context::Alltoall(const std::string& name, const void* in, DataType dtype,
                         std::vector<int64_t> shape, std::vector<int64_t> splits,
                         OpOptions options) {
  TensorRequest r = Request(name, CollectiveType::kAlltoall, dtype, std::move(shape));
  r.splits = std::move(splits);
  r.process_set = options.process_set;
  return impl_->Submit(std::move(r), in, nullptr, options.device);
}

Handle Context::Reducescatter(const std::string& name, const void* in, DataType dtype,
                              std::vector<int64_t> shape, AllreduceOptions options) {
  TensorRequest r = Request(name, CollectiveType::kReducescatter, dtype, std::move(shape));
  SetReduction(r, options);
  r.process_set = options.process_set;
  return impl_->Submit(std::move(r), in, nullptr, options.device, options.compression);
}

Handle Context::AllgatherInto(const std::string& name, const void* in, void* out, size_t out_bytes,
                              DataType dtype, std::vector<int64_t> shape, OpOptions options) {
  TensorRequest r = Request(name, CollectiveType::kAllgather, dtype, std::move(shape));
  r.process_set = options.process_set;
  return impl_->Submit(std::move(r), in, out, options.device, std::nullopt, out_bytes,
                       /*wait=*/false, options.handle_owned_if_too_small);
}

Handle Context::AlltoallInto(const std::string& name, const void* in, void* out, size_t out_bytes,
                             DataType dtype, std::vector<int64_t> shape,
                             std::vector<int64_t> splits, OpOptions options) {
  TensorRequest r = Request(name, CollectiveType::kAlltoall, dtype, std::move(shape));
  r.splits = std::move(splits);
  r.process_set = options.process_set;
  return impl_->Submit(std::move(r), in, out, options.device, std::nullopt, out_bytes,
                       /*wait=*/false, options.handle_owned_if_too_small);
}

Handle Context::ReducescatterInto(const std::string& name, const void* in, void* out,
                                  size_t out_bytes, DataType dtype, std::vector<int64_t> shape,
                                  AllreduceOptions options) {
  TensorRequest r = Request(name, CollectiveType::kReducescatter, dtype, std::move(shape));
  SetReduction(r, options);
  r.process_set = options.process_set;
  return impl_->Submit(std::move(r), in, out, options.device, options.compression, out_bytes);
}

Handle Context::Barrier(OpOptions options) {
  TensorRequest r = Request(impl_->NextBarrierName(options.process_set), CollectiveType::kBarrier,
                            DataType::kUint8, {0});
  r.process_set = options.process_set;
  return impl_->Submit(std::move(r), nullptr, nullptr);
}

Handle Context::ElasticCommit() {
  return impl_->Submit(Request(impl_->NextControlName(kElasticCommitPrefix),
                               CollectiveType::kBarrier, DataType::kUint8, {0}),
                       nullptr, nullptr);
}

absl::StatusOr<int> Context::AddProcessSet(std::vector<int> ranks) {
  // Checked by the coordinator, not here: every rank then fails alike, none waits forever.
  TensorRequest r = Request(impl_->NextControlName(kAddProcessSetPrefix), CollectiveType::kBarrier,
                            DataType::kUint8, {0});
  r.process_set_ranks = std::move(ranks);
  Handle handle = impl_->Submit(std::move(r), nullptr, nullptr);
  if (absl::Status s = handle.Wait(); !s.ok()) return s;
  return internal::ContextImpl::ProcessSetId(handle);
}

absl::StatusOr<std::pair<int, int>> Context::ProcessSetMember(int process_set) const {
  return impl_->ProcessSetMember(process_set);
}

absl::Status Context::RemoveProcessSet(int id) {
  TensorRequest r = Request(impl_->NextControlName(kRemoveProcessSetPrefix),
                            CollectiveType::kBarrier, DataType::kUint8, {0});
  r.process_set_ranks = {id};
  return impl_->Submit(std::move(r), nullptr, nullptr).Wait();
}

namespace {

// The entries of a grouped operation of `type`: every request names the group and its size.
std::vector<internal::Entry> GroupEntries(const std::string& group,
                                          const std::vector<GroupTensor>& tensors,
                                          CollectiveType type, int process_set,
                                          const AllreduceOptions* reduce) {
  std::vector<internal::Entry> entries;
  for (const GroupTensor& t : tensors) {
    TensorRequest r = Request(t.name, type, t.dtype, t.shape);
    if (reduce != nullptr) SetReduction(r, *reduce);
    r.group = group;
    r.group_size = static_cast<int>(tensors.size());
    r.process_set = process_set;
    internal::Entry entry{std::move(r), t.in, nullptr, nullptr};
    if (type == CollectiveType::kAllreduce) entry.out = t.out;
    if (type == CollectiveType::kReducescatter) {  // into the caller's buffer
      entry.out = t.out;
      entry.caller_output = true;
      entry.out_bytes = t.out_bytes;
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

}  // namespace

std::vector<Handle> Context::GroupedAllreduce(const std::string& group,
                                              const std::vector<GroupTensor>& tensors,
                                              AllreduceOptions options) {
  return impl_->SubmitGroup(
      GroupEntries(group, tensors, CollectiveType::kAllreduce, options.process_set, &options),
      options.device, options.compression);
}

std::vector<Handle> Context::GroupedAllgather(const std::string& group,
                                              const std::vector<GroupTensor>& tensors,
                                              OpOptions options) {
  return impl_->SubmitGroup(
      GroupEntries(group, tensors, CollectiveType::kAllgather, options.process_set, nullptr),
      options.device, std::nullopt);
}

std::vector<Handle> Context::GroupedReducescatter(const std::string& group,
                                                  const std::vector<GroupTensor>& tensors,
                                                  AllreduceOptions options) {
  return impl_->SubmitGroup(
      GroupEntries(group, tensors, CollectiveType::kReducescatter, options.process_set, &options),
      options.device, options.compression);
}

Handle Context::Join() {
  return impl_->Submit(Request(kJoinTensorName, CollectiveType::kJoin, DataType::kUint8, {}),
                       nullptr, nullptr);
}

}  // namespace troika
