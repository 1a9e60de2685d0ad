// troika-rank-latency: the 4-byte allreduce latency through the C++ API, as one rank of a job
// launched by troikarun (every rank runs this program):
//
//   troikarun -np 4 -- ./build/bench/troika-rank-latency --iters 2000
//
// It is the C++ side of bench/torch_bench.py's Python-layer cost: the same job shape (separate
// processes, agents, coordinator) as `troikarun -np 4 -- python3 ...` with troika.torch, so the
// ratio of the two is what the Python layer adds. Each rank runs --warmup then --iters
// allreduces of one float32 (Sum, one name, each waited before the next); rank 0 prints the
// mean time per allreduce.

#include <chrono>
#include <cstdio>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "troika/troika.h"

ABSL_FLAG(int, iters, 2000, "timed allreduces");
ABSL_FLAG(int, warmup, 200, "untimed allreduces first");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto options = troika::Options::FromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 1;
  }
  auto ctx = troika::Context::Init(*options);
  if (!ctx.ok()) {
    std::fprintf(stderr, "%s\n", ctx.status().ToString().c_str());
    return 1;
  }
  float value = 1.0f;
  troika::AllreduceOptions sum;
  sum.op = troika::ReduceOp::kSum;
  sum.wait = true;  // synchronous, as hvd.allreduce is
  auto run = [&](int n) -> bool {
    for (int i = 0; i < n; ++i) {
      absl::Status s =
          (*ctx)->Allreduce("latency", &value, &value, troika::DataType::kFloat32, {1}, sum).Wait();
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return false;
      }
      value = 1.0f;
    }
    return true;
  };
  if (!run(absl::GetFlag(FLAGS_warmup))) return 1;
  const int iters = absl::GetFlag(FLAGS_iters);
  const auto start = std::chrono::steady_clock::now();
  if (!run(iters)) return 1;
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() /
      iters;
  if ((*ctx)->rank() == 0) {
    std::printf("c++ api: 4-byte allreduce, %d ranks, %d iters: %.1f us per allreduce\n",
                (*ctx)->size(), iters, us);
  }
  absl::Status s = (*ctx)->Shutdown();
  return s.ok() ? 0 : 1;
}
