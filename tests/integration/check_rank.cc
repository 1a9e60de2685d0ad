// troika-test-check-rank: a rank that checks an allreduce, an allgather and a broadcast against
// the values every rank must see (and, with 3 ranks or more, an allreduce in a process set of
// all but the last rank), prints "check ok" (with its host and data plane) and exits 0,
// or prints what differed and exits 1.

#include <cstdint>
#include <cstdio>
#include <vector>

#include "troika/troika.h"

int main() {
  auto options = troika::Options::FromEnvironment();
  if (!options.ok()) return std::fprintf(stderr, "%s\n", options.status().ToString().c_str()), 2;
  auto context = troika::Context::Init(*options);
  if (!context.ok()) return std::fprintf(stderr, "%s\n", context.status().ToString().c_str()), 1;
  troika::Context& c = **context;
  const int rank = c.rank(), size = c.size();

  // Allreduce, 1 MiB: element i sums (r + 1) * (i % 7) over ranks.
  const int64_t n = 1 << 18;
  std::vector<float> data(n);
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>((rank + 1) * (i % 7));
  if (absl::Status s =
          c.Allreduce("check/allreduce", data.data(), data.data(), troika::DataType::kFloat32, {n})
              .Wait();
      !s.ok()) {
    return std::fprintf(stderr, "allreduce: %s\n", s.ToString().c_str()), 1;
  }
  const float ranks_sum = size * (size + 1) / 2.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (data[i] != ranks_sum * (i % 7)) {
      return std::fprintf(stderr, "allreduce element %lld: %f\n", static_cast<long long>(i),
                          data[i]),
             1;
    }
  }

  // Allgather: rank r contributes r + 1 rows of 3 int64 holding r.
  std::vector<int64_t> rows((rank + 1) * 3, rank);
  troika::Handle h =
      c.Allgather("check/allgather", rows.data(), troika::DataType::kInt64, {rank + 1, 3});
  if (absl::Status s = h.Wait(); !s.ok()) {
    return std::fprintf(stderr, "allgather: %s\n", s.ToString().c_str()), 1;
  }
  const int64_t* out = static_cast<const int64_t*>(h.output());
  size_t at = 0;
  for (int r = 0; r < size; ++r) {
    for (int k = 0; k < (r + 1) * 3; ++k, ++at) {
      if (out[at] != r) return std::fprintf(stderr, "allgather row of rank %d wrong\n", r), 1;
    }
  }
  // Broadcast from the last rank, 1 MiB + 3 bytes of its pattern, in place.
  std::vector<uint8_t> bytes((1 << 20) + 3, 0);
  const int root = size - 1;
  auto pattern = [root](size_t i) { return static_cast<uint8_t>((i * 13 + root * 7) ^ (i >> 9)); };
  if (rank == root) {
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = pattern(i);
  }
  if (absl::Status s =
          c.Broadcast("check/broadcast", bytes.data(), bytes.data(), troika::DataType::kUint8,
                      {static_cast<int64_t>(bytes.size())}, root)
              .Wait();
      !s.ok()) {
    return std::fprintf(stderr, "broadcast: %s\n", s.ToString().c_str()), 1;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != pattern(i)) return std::fprintf(stderr, "broadcast byte %zu wrong\n", i), 1;
  }
  // With 3 ranks or more, a process set of every rank but the last (its own communicator,
  // its data plane chosen from its own ranks' hosts): a 10 MiB allreduce in it.
  if (size >= 3) {
    std::vector<int> members;
    for (int r = 0; r + 1 < size; ++r) members.push_back(r);
    absl::StatusOr<int> set = c.AddProcessSet(members);
    if (!set.ok()) return std::fprintf(stderr, "add set: %s\n", set.status().ToString().c_str()), 1;
    if (rank + 1 < size) {
      std::vector<int32_t> values(10 << 18, rank + 1);
      if (absl::Status s = c.Allreduce("check/set_allreduce", values.data(), values.data(),
                                       troika::DataType::kInt32,
                                       {static_cast<int64_t>(values.size())}, {.process_set = *set})
                               .Wait();
          !s.ok()) {
        return std::fprintf(stderr, "set allreduce: %s\n", s.ToString().c_str()), 1;
      }
      const int32_t expected = (size - 1) * size / 2;
      for (size_t i = 0; i < values.size(); ++i) {
        if (values[i] != expected) {
          return std::fprintf(stderr, "set allreduce element %zu: %d\n", i, values[i]), 1;
        }
      }
    }
    if (absl::Status s = c.RemoveProcessSet(*set); !s.ok()) {
      return std::fprintf(stderr, "remove set: %s\n", s.ToString().c_str()), 1;
    }
  }
  std::printf("check ok on rank %d of %d (host %s), data plane %s\n", rank, size,
              options->host.c_str(), options->transport.c_str());
  return 0;
}
