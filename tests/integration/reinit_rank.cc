// troika-test-reinit-rank CYCLES: a rank that joins its job, then CYCLES times shuts down and
// joins again (init → shutdown → init, as Horovod's own tests do), checking after each join
// that the rank and size are the same and that an allreduce and an allgather under the same
// names as before give the right results. Prints "reinit ok on rank R of N: C cycles,
// shutdown median S ms, init median I ms, max M ms" and exits 0; on an error prints "error
// <where>: <status>" and exits 1 (3 for a failed init).
//
// With REINIT_CHECK_EVERY=K, only every K-th cycle checks the collectives: the others shut down
// as soon as they joined, as Horovod's test_horovod_reinit does (init; shutdown; init).
//
// With REINIT_HOLDINGS=1, rank 0 also prints what it, its agent (its parent) and troikarun
// (the agent's parent, with the embedded coordinator) hold after the second cycle and after
// the last: "holdings WHO: T1 -> T2 threads, F1 -> F2 descriptors, R1 -> R2 KiB" (threads of
// gRPC's own pools, which grow and shrink with the load, not counted).
//
// Faults, for the tests (REINIT_RANK picks the rank, after its first shutdown):
//   REINIT_FAULT=crash  it exits 3 instead of joining again;
//   REINIT_FAULT=exit   it exits 0 instead of joining again;
//   REINIT_FAULT=stay   it stays REINIT_STAY_SECONDS (default 30) without joining, then exits 0.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/integration/process_holdings.h"
#include "troika/troika.h"

namespace {

using troika::testing::Holdings;
using troika::testing::HoldingsOf;

int Fail(const std::string& where, const absl::Status& status, int code = 1) {
  std::printf("error %s: %s\n", where.c_str(), status.ToString().c_str());
  std::fflush(stdout);
  return code;
}

// One round of collectives under fixed names: every incarnation sees them afresh.
absl::Status Check(troika::Context& c, int cycle) {
  const int rank = c.rank(), size = c.size();
  std::vector<float> data(1000, static_cast<float>(rank + cycle));
  absl::Status s =
      c.Allreduce("reinit/allreduce", data.data(), data.data(), troika::DataType::kFloat32, {1000})
          .Wait();
  if (!s.ok()) return s;
  const float want = size * (size - 1) / 2.0f + static_cast<float>(size * cycle);
  for (float v : data) {
    if (v != want) return absl::InternalError(absl::StrCat("allreduce gave ", v, ", not ", want));
  }
  std::vector<int64_t> mine(rank + 1, rank * 100 + cycle);
  troika::Handle h =
      c.Allgather("reinit/allgather", mine.data(), troika::DataType::kInt64, {rank + 1});
  if (s = h.Wait(); !s.ok()) return s;
  const int64_t* out = static_cast<const int64_t*>(h.output());
  for (int r = 0, at = 0; r < size; ++r) {
    for (int k = 0; k <= r; ++k, ++at) {
      if (out[at] != r * 100 + cycle) return absl::InternalError("allgather gave a wrong row");
    }
  }
  return absl::OkStatus();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

pid_t ParentOf(pid_t pid) {
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');  // "pid (comm) state ppid ..."
  int ppid = 0;
  if (paren == std::string::npos || std::sscanf(stat.c_str() + paren + 1, " %*c %d", &ppid) != 1) {
    return 0;
  }
  return ppid;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int cycles = argc > 1 ? std::atoi(argv[1]) : 10;
  const char* every = std::getenv("REINIT_CHECK_EVERY");
  const int check_every = every != nullptr ? std::max(1, std::atoi(every)) : 1;
  auto options = troika::Options::FromEnvironment();
  if (!options.ok()) return Fail("options", options.status(), 2);
  const char* fault = std::getenv("REINIT_FAULT");
  const char* fault_rank = std::getenv("REINIT_RANK");
  const bool faulty =
      fault != nullptr && fault_rank != nullptr && std::atoi(fault_rank) == options->rank;
  auto context = troika::Context::Init(*options);
  if (!context.ok()) return Fail("init", context.status(), 3);
  const int rank = (*context)->rank(), size = (*context)->size();
  if (absl::Status s = Check(**context, 0); !s.ok()) return Fail("cycle 0", s);
  std::vector<double> shutdown_ms, init_ms;
  const bool holdings = rank == 0 && std::getenv("REINIT_HOLDINGS") != nullptr;
  const pid_t agent = ParentOf(getpid()), launcher = ParentOf(agent);
  const std::vector<std::pair<std::string, pid_t>> holders = {
      {"rank 0", getpid()}, {"agent", agent}, {"troikarun", launcher}};
  std::vector<Holdings> before;
  for (int cycle = 1; cycle <= cycles; ++cycle) {
    if (holdings && cycle == 3) {
      for (const auto& [who, pid] : holders) before.push_back(HoldingsOf(pid));
    }
    absl::Time start = absl::Now();
    if (absl::Status s = (*context)->Shutdown(); !s.ok()) return Fail("shutdown", s);
    context->reset();
    shutdown_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
    if (faulty) {
      const std::string what = fault;
      std::printf("fault %s after shutdown\n", what.c_str());
      std::fflush(stdout);
      if (what == "crash") std::_Exit(3);
      if (what == "stay") {
        const char* seconds = std::getenv("REINIT_STAY_SECONDS");
        sleep(seconds != nullptr ? std::atoi(seconds) : 30);
      }
      return 0;
    }
    start = absl::Now();
    context = troika::Context::Init(*options);
    if (!context.ok())
      return Fail(absl::StrCat("init again (cycle ", cycle, ")"), context.status(), 3);
    init_ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - start));
    if ((*context)->rank() != rank || (*context)->size() != size) {
      return Fail("init again", absl::InternalError(absl::StrCat("rank ", (*context)->rank(),
                                                                 " of ", (*context)->size())));
    }
    if (cycle % check_every != 0) continue;
    if (absl::Status s = Check(**context, cycle); !s.ok()) {
      return Fail(absl::StrCat("cycle ", cycle), s);
    }
  }
  for (size_t i = 0; i < before.size(); ++i) {
    const Holdings after = HoldingsOf(holders[i].second);
    std::printf("holdings %s: %d -> %d threads, %d -> %d descriptors, %lld -> %lld KiB\n",
                holders[i].first.c_str(), before[i].threads, after.threads, before[i].fds,
                after.fds, static_cast<long long>(before[i].rss_kib),
                static_cast<long long>(after.rss_kib));
  }
  if (absl::Status s = (*context)->Shutdown(); !s.ok()) return Fail("last shutdown", s);
  std::vector<double> both;
  for (size_t i = 0; i < init_ms.size(); ++i) both.push_back(shutdown_ms[i] + init_ms[i]);
  std::printf(
      "reinit ok on rank %d of %d: %d cycles, shutdown median %.1f ms, init median %.1f ms, "
      "cycle median %.1f ms, max %.1f ms\n",
      rank, size, cycles, Median(shutdown_ms), Median(init_ms), Median(both),
      both.empty() ? 0.0 : *std::max_element(both.begin(), both.end()));
  return 0;
}
