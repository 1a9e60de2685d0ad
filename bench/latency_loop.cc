// libtroika_bench_loop.so: the C++ API's side of bench/torch_allreduce_latency.py, run inside
// the Python rank itself. The script loads it with ctypes and calls
//
//   troika_bench_allreduce_loop(troika._troika.Context.address, iters, &seconds)
//
// in blocks alternating with the same loop written against troika.torch (hvd.allreduce), so
// both go through the same context, job, process and moment of a shared machine: their ratio
// is what the Python layer adds. The loop is troika.torch's synchronous allreduce in C++: one
// float32, Sum, one name ("allreduce.latency": what hvd.allreduce(..., name="latency")
// negotiates, as the Python modes), each waited before the next.

#include <chrono>
#include <cstdint>
#include <cstdio>

#include "troika/troika.h"

constexpr char kName[] = "allreduce.latency";

extern "C" int troika_bench_allreduce_loop(uintptr_t context, int iters, double* seconds) {
  auto* ctx = reinterpret_cast<troika::Context*>(context);
  float value = 1.0f;
  troika::AllreduceOptions sum;
  sum.op = troika::ReduceOp::kSum;
  sum.wait = true;  // synchronous, as hvd.allreduce is
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    absl::Status s =
        ctx->Allreduce(kName, &value, &value, troika::DataType::kFloat32, {1}, sum).Wait();
    if (!s.ok()) {
      std::fprintf(stderr, "troika_bench_allreduce_loop: %s\n", s.ToString().c_str());
      return -1;
    }
    value = 1.0f;
  }
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return 0;
}
