#include "bench/workloads.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace troika::bench {
namespace {

// Tensor names are "<op>.bench/...", what troika.torch negotiates for name="bench/..."
// (Horovod's "<op>.<name>"), so that bench/torch_workloads.py's troika.torch modes submit the
// same requests as these and one steady-state schedule holds across its alternating blocks
// (a change of names would make the mode after it pay the negotiations that form it again).

// Buffers start zeroed: in-place reductions then keep producing zeros, never overflowing
// into infinities or slow denormals however many iterations run.
class AllreduceWorkload : public Workload {
 public:
  AllreduceWorkload(size_t bytes, std::string name, bool wait)
      : data_(bytes / sizeof(float)), name_(std::move(name)), wait_(wait) {}
  absl::Status RunRaw(transport::Communicator& raw) override {
    return raw.Allreduce(data_.data(), data_.size(), DataType::kFloat32, ReduceOp::kSum);
  }
  absl::Status RunTroika(Context& troika) override {
    return troika
        .Allreduce(name_, data_.data(), data_.data(), DataType::kFloat32,
                   {static_cast<int64_t>(data_.size())}, {.wait = wait_})
        .Wait();
  }

 private:
  std::vector<float> data_;
  const std::string name_;
  const bool wait_;
};

class AllgatherWorkload : public Workload {
 public:
  AllgatherWorkload(size_t bytes, int ranks)
      : in_(bytes / ranks),
        out_(bytes),
        recv_bytes_(ranks, bytes / ranks),
        name_(absl::StrCat("allgather.bench/", bytes)) {}
  absl::Status RunRaw(transport::Communicator& raw) override {
    return raw.Allgatherv(in_.data(), out_.data(), recv_bytes_);
  }
  absl::Status RunTroika(Context& troika) override {
    return troika.Allgather(name_, in_.data(), DataType::kUint8, {static_cast<int64_t>(in_.size())})
        .Wait();
  }

 private:
  std::vector<char> in_, out_;
  std::vector<size_t> recv_bytes_;
  const std::string name_;
};

class BroadcastWorkload : public Workload {
 public:
  explicit BroadcastWorkload(size_t bytes)
      : data_(bytes), name_(absl::StrCat("broadcast.bench/", bytes)) {}
  absl::Status RunRaw(transport::Communicator& raw) override {
    return raw.Broadcast(data_.data(), data_.size(), /*root=*/0);
  }
  absl::Status RunTroika(Context& troika) override {
    return troika
        .Broadcast(name_, data_.data(), data_.data(), DataType::kUint8,
                   {static_cast<int64_t>(data_.size())}, /*root=*/0)
        .Wait();
  }

 private:
  std::vector<char> data_;
  const std::string name_;
};

class AlltoallWorkload : public Workload {
 public:
  AlltoallWorkload(size_t bytes, int ranks)
      : in_(bytes),
        out_(bytes),
        split_bytes_(ranks, bytes / ranks),
        name_(absl::StrCat("alltoall.bench/", bytes)) {}
  absl::Status RunRaw(transport::Communicator& raw) override {
    return raw.Alltoallv(in_.data(), split_bytes_, out_.data(), split_bytes_);
  }
  absl::Status RunTroika(Context& troika) override {
    return troika.Alltoall(name_, in_.data(), DataType::kUint8, {static_cast<int64_t>(in_.size())})
        .Wait();
  }

 private:
  std::vector<char> in_, out_;
  std::vector<size_t> split_bytes_;
  const std::string name_;
};

class ReducescatterWorkload : public Workload {
 public:
  ReducescatterWorkload(size_t bytes, int ranks)
      : data_(bytes / sizeof(float)),
        counts_(ranks, data_.size() / ranks),
        name_(absl::StrCat("reducescatter.bench/", bytes)) {}
  absl::Status RunRaw(transport::Communicator& raw) override {
    return raw.ReduceScatter(data_.data(), counts_, DataType::kFloat32, ReduceOp::kSum);
  }
  absl::Status RunTroika(Context& troika) override {
    return troika
        .Reducescatter(name_, data_.data(), DataType::kFloat32,
                       {static_cast<int64_t>(data_.size())})
        .Wait();
  }

 private:
  std::vector<float> data_;
  std::vector<size_t> counts_;
  const std::string name_;
};

// A training step's worth of small gradients: Troika gets them all at once (and may fuse
// them); the raw baseline can only reduce them one after another.
class ManySmallWorkload : public Workload {
 public:
  ManySmallWorkload(size_t bytes, int tensors) {
    for (int i = 0; i < tensors; ++i) {
      tensors_.emplace_back(bytes / sizeof(float));
      names_.push_back(absl::StrCat("allreduce.bench/small/", i));
    }
  }
  absl::Status RunRaw(transport::Communicator& raw) override {
    for (std::vector<float>& t : tensors_) {
      absl::Status s = raw.Allreduce(t.data(), t.size(), DataType::kFloat32, ReduceOp::kSum);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  absl::Status RunTroika(Context& troika) override {
    handles_.clear();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      handles_.push_back(troika.Allreduce(names_[i], tensors_[i].data(), tensors_[i].data(),
                                          DataType::kFloat32,
                                          {static_cast<int64_t>(tensors_[i].size())}));
    }
    absl::Status status;
    for (const Handle& h : handles_) status.Update(h.Wait());
    return status;
  }

 private:
  std::vector<std::vector<float>> tensors_;
  std::vector<std::string> names_;
  std::vector<Handle> handles_;
};

}  // namespace

const std::vector<KindInfo>& AllKinds() {
  static const auto* kinds = new std::vector<KindInfo>{
      {Kind::kAllreduce, "allreduce", "allreduce (float32 sum)"},
      {Kind::kAllgather, "allgather", "allgather (bytes; size = gathered output)"},
      {Kind::kBroadcast, "broadcast", "broadcast (bytes, root 0)"},
      {Kind::kAlltoall, "alltoall", "alltoall (bytes; size = one rank's send buffer)"},
      {Kind::kReducescatter, "reducescatter", "reducescatter (float32 sum; size = input)"},
      {Kind::kManySmall, "many_small", "many small tensors (float32 allreduce)"},
      {Kind::kLatency, "latency", "allreduce latency (4 bytes)"},
  };
  return *kinds;
}

std::optional<Kind> KindFromName(const std::string& name) {
  for (const KindInfo& info : AllKinds()) {
    if (name == info.name) return info.kind;
  }
  return std::nullopt;
}

const char* KindName(Kind kind) {
  for (const KindInfo& info : AllKinds()) {
    if (info.kind == kind) return info.name;
  }
  return "?";
}

double BusFactor(Kind kind, int ranks) {
  const double n = ranks;
  switch (kind) {
    case Kind::kAllreduce:
    case Kind::kManySmall:
    case Kind::kLatency:
      return 2 * (n - 1) / n;
    case Kind::kAllgather:
    case Kind::kAlltoall:
    case Kind::kReducescatter:
      return (n - 1) / n;
    case Kind::kBroadcast:
      return 1;
  }
  return 1;
}

size_t EffectiveBytes(Kind kind, size_t requested, int ranks) {
  size_t unit = 1;
  switch (kind) {
    case Kind::kAllreduce:
    case Kind::kManySmall:
    case Kind::kLatency:
      unit = sizeof(float);
      break;
    case Kind::kAllgather:
    case Kind::kAlltoall:
      unit = ranks;
      break;
    case Kind::kReducescatter:
      unit = sizeof(float) * ranks;
      break;
    case Kind::kBroadcast:
      break;
  }
  return std::max(unit, requested / unit * unit);
}

std::unique_ptr<Workload> MakeWorkload(Kind kind, size_t bytes, int tensors, int ranks, bool wait) {
  switch (kind) {
    case Kind::kAllreduce:
      return std::make_unique<AllreduceWorkload>(bytes, absl::StrCat("allreduce.bench/", bytes),
                                                 wait);
    case Kind::kLatency:
      return std::make_unique<AllreduceWorkload>(bytes, "allreduce.bench/latency", wait);
    case Kind::kAllgather:
      return std::make_unique<AllgatherWorkload>(bytes, ranks);
    case Kind::kBroadcast:
      return std::make_unique<BroadcastWorkload>(bytes);
    case Kind::kAlltoall:
      return std::make_unique<AlltoallWorkload>(bytes, ranks);
    case Kind::kReducescatter:
      return std::make_unique<ReducescatterWorkload>(bytes, ranks);
    case Kind::kManySmall:
      return std::make_unique<ManySmallWorkload>(bytes, tensors);
  }
  return nullptr;
}

}  // namespace troika::bench
