// troika-test-fault-rank: a rank for failure tests. Allreduces 1 MiB per step, forever, with
// several allreduces in flight; writes its pid (and its parent's: the agent) to
// $FAULT_DIR/pid.<rank> and ppid.<rank> after a few steps; when an operation fails prints
// "error-at <unix ms> <message>" and exits 3. With FAULT_EXIT_RANK=<rank> that rank prints
// "exit-at <unix ms>" and exits 1 after 10 steps.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "troika/troika.h"

namespace {

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

void WriteNumber(const std::string& path, long value) {
  std::ofstream(path + ".tmp") << value << "\n";
  std::rename((path + ".tmp").c_str(), path.c_str());
}

}  // namespace

int main() {
  auto options = troika::Options::FromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 2;
  }
  auto context = troika::Context::Init(*options);
  if (!context.ok()) {
    std::printf("error-at %lld %s\n", static_cast<long long>(NowMs()),
                context.status().ToString().c_str());
    return 3;
  }
  const int rank = (*context)->rank();
  const char* dir = std::getenv("FAULT_DIR");
  const char* exit_rank = std::getenv("FAULT_EXIT_RANK");
  constexpr int kInFlight = 4;
  std::vector<std::vector<float>> grads(kInFlight, std::vector<float>(1 << 18, 1.0f));
  for (int step = 0;; ++step) {
    if (step == 5 && dir != nullptr) {
      WriteNumber(absl::StrCat(dir, "/ppid.", rank), getppid());
      WriteNumber(absl::StrCat(dir, "/pid.", rank), getpid());
    }
    if (exit_rank != nullptr && std::atoi(exit_rank) == rank && step == 10) {
      std::printf("exit-at %lld\n", static_cast<long long>(NowMs()));
      std::fflush(stdout);
      std::_Exit(1);  // no clean shutdown: a crash as the job sees it
    }
    std::vector<troika::Handle> handles;
    for (int i = 0; i < kInFlight; ++i) {
      handles.push_back((*context)->Allreduce(absl::StrCat("step", step, "/", i), grads[i].data(),
                                              grads[i].data(), troika::DataType::kFloat32,
                                              {1 << 18}, {.op = troika::ReduceOp::kAverage}));
    }
    for (troika::Handle& h : handles) {
      if (absl::Status s = h.Wait(); !s.ok()) {
        std::printf("error-at %lld %s\n", static_cast<long long>(NowMs()), s.ToString().c_str());
        std::fflush(stdout);
        return 3;
      }
    }
  }
}
