// The C++ API's side of bench/torch_workloads.py: troika-bench's own workloads
// (bench/workloads.h: the same buffers, names and calls as troika-bench's "troika" column) run
// inside a Python rank of a troikarun job, on that process's troika.Context, in blocks that
// alternate with the same workload written against troika.torch. Both then go through the
// same job, context, data plane and moment of a shared machine, and their ratio is what the
// Python front end adds. Built into libtroika_bench_loop.so beside latency_loop.cc; the script
// calls it with ctypes (which releases the GIL):
//
//   w = troika_bench_workload_new("allgather", 64 << 20, /*tensors=*/1, /*ranks=*/4)
//   troika_bench_workload_run(w, troika._troika.Context.address, iters, &seconds)
//   troika_bench_workload_free(w)

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>

#include "bench/workloads.h"
#include "troika/troika.h"

// A workload of troika-bench's (--ops name: allreduce, allgather, broadcast, alltoall,
// reducescatter, many_small, latency) of `bytes` (rounded as troika-bench rounds them; for
// many_small one tensor's bytes, `tensors` of them), for `ranks` ranks. Null for an unknown
// kind. Free with troika_bench_workload_free.
extern "C" void* troika_bench_workload_new(const char* kind, size_t bytes, int tensors, int ranks) {
  std::optional<troika::bench::Kind> k = troika::bench::KindFromName(kind);
  if (!k.has_value() || ranks < 1 || tensors < 1) return nullptr;
  bytes = troika::bench::EffectiveBytes(*k, bytes, ranks);
  return troika::bench::MakeWorkload(*k, bytes, tensors, ranks).release();
}

// `iters` iterations of the workload through the C++ API on `context` (a troika::Context*,
// troika._troika.Context.address), each waited before the next; `*seconds` their wall time.
// Returns 0, or -1 after printing the error to stderr.
extern "C" int troika_bench_workload_run(void* workload, uintptr_t context, int iters,
                                         double* seconds) {
  auto* w = static_cast<troika::bench::Workload*>(workload);
  auto* ctx = reinterpret_cast<troika::Context*>(context);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    if (absl::Status s = w->RunTroika(*ctx); !s.ok()) {
      std::fprintf(stderr, "troika_bench_workload_run: %s\n", s.ToString().c_str());
      return -1;
    }
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 0;
}

extern "C" void troika_bench_workload_free(void* workload) {
  delete static_cast<troika::bench::Workload*>(workload);
}
