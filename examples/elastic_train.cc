// troika-example-elastic: a rank of an elastic job (docs/elastic.md), training through
// troika::elastic::Run. Run it with
//
//   troikarun -np 4 --nproc-per-node 2 --min-np 2 -- ./build/examples/troika-example-elastic
//
// and kill a rank (or an agent) with SIGKILL while it trains: the others go on from their
// last commit. With --max-np above -np, a troika-agent started for the job while it trains
// is admitted at the next commit, and its ranks start from rank 0's state. It trains a linear model
// (--dim weights, each rank's gradient from its own synthetic batch: a target that depends on the
// step and the rank), committing every
// --commit_every steps, for --steps steps, sleeping --step_ms per step (a stand-in for the
// forward and backward pass). With --pid_dir it writes its pid to DIR/pid.<TROIKA_RANK> once
// it has run 5 steps (for tests and bench/elastic_recovery.py). It prints:
//   "step S size N"                            every 10 steps
//   "synced to step S"                         at the start of every generation (rank 0's)
//   "restored to step S from step T at MS"     after a membership change that lost ranks
//                                              (MS: unix time, ms)
//   "generation E first step at MS"            once the first step of a later generation is done
//   "done steps S size N epoch E weights H"    at the end (H: a hash of the weights' bits)
//   "error <status>"                           and exits 3 on any other error.
// It exits 0, or --exit_code once done.

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "troika/elastic.h"
#include "troika/troika.h"

ABSL_FLAG(int, steps, 200, "training steps");
ABSL_FLAG(int, commit_every, 10, "steps between commits: at most this many are lost");
ABSL_FLAG(int, step_ms, 10, "milliseconds each step sleeps");
ABSL_FLAG(int, dim, 1024, "weights of the model");
ABSL_FLAG(std::string, pid_dir, "", "write pid.<TROIKA_RANK> here after 5 steps");
ABSL_FLAG(std::string, fail_at, "",
          "tests: MEMBER:restore (the rank that started as MEMBER exits 1 the first time it "
          "restores its commit, while its agent attaches the next generation) or "
          "MEMBER:sync (when it syncs in a later generation, attached)");
ABSL_FLAG(int, exit_code, 0,
          "tests: exit with this code once training is done and the job shut down (a rank "
          "that fails after it left)");
ABSL_FLAG(int, min_generation, 0,
          "train on past --steps until the job is at this generation (tests: training lasts "
          "as long as the membership changes they make)");

namespace {

uint64_t HashBits(const std::vector<float>& values) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (float v : values) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    for (int i = 0; i < 4; ++i) {
      h ^= (bits >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

class Model : public troika::elastic::State {
 public:
  // fail_at: "restore" or "sync" (--fail_at, for this rank), or empty.
  Model(int dim, std::string fail_at) : weights_(dim, 0.0f), fail_at_(std::move(fail_at)) {
    Commit();
  }

  void Commit() override {
    committed_weights_ = weights_;
    committed_step_ = step_;
  }
  void Restore() override {
    FailIf("restore");
    std::printf("restored to step %lld from step %lld at %lld\n",
                static_cast<long long>(committed_step_), static_cast<long long>(step_),
                static_cast<long long>(absl::ToUnixMillis(absl::Now())));
    std::fflush(stdout);
    weights_ = committed_weights_;
    step_ = committed_step_;
  }
  absl::Status Sync(troika::Context& ctx) override {
    if (ctx.membership().epoch > 1) FailIf("sync");
    const int64_t dim = static_cast<int64_t>(weights_.size());
    troika::Handle w = ctx.Broadcast("sync/weights", weights_.data(), weights_.data(),
                                     troika::DataType::kFloat32, {dim}, 0);
    troika::Handle s = ctx.Broadcast("sync/step", &step_, &step_, troika::DataType::kInt64, {1}, 0);
    if (absl::Status status = w.Wait(); !status.ok()) return status;
    if (absl::Status status = s.Wait(); !status.ok()) return status;
    Commit();
    std::printf("synced to step %lld\n", static_cast<long long>(step_));
    std::fflush(stdout);
    return absl::OkStatus();
  }

  std::vector<float>& weights() { return weights_; }
  int64_t& step() { return step_; }

 private:
  void FailIf(const char* where) {
    if (fail_at_ != where) return;
    std::printf("failing at %s\n", where);
    std::fflush(stdout);
    _exit(1);
  }

  std::vector<float> weights_, committed_weights_;
  int64_t step_ = 0, committed_step_ = 0;
  std::string fail_at_;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto options = troika::Options::FromEnvironment();
  if (!options.ok()) {
    std::printf("error %s\n", options.status().ToString().c_str());
    return 2;
  }
  const int dim = absl::GetFlag(FLAGS_dim);
  const int steps = absl::GetFlag(FLAGS_steps);
  const int commit_every = absl::GetFlag(FLAGS_commit_every);
  const int step_ms = absl::GetFlag(FLAGS_step_ms);
  const int min_generation = absl::GetFlag(FLAGS_min_generation);
  const std::string dir = absl::GetFlag(FLAGS_pid_dir);
  const int member = options->rank;  // TROIKA_RANK: the rank it started as
  const std::string fail_at = absl::GetFlag(FLAGS_fail_at);
  const std::string mine = absl::StrCat(member, ":");
  Model model(dim, absl::StartsWith(fail_at, mine) ? fail_at.substr(mine.size()) : "");
  int size = 0;
  int64_t epoch = 0;
  std::vector<float> grad(dim);
  absl::Status status = troika::elastic::Run(*options, model, [&](troika::Context& ctx) {
    size = ctx.size();
    epoch = ctx.membership().epoch;
    bool first = true;
    // Every rank of a generation has the same step and epoch: all stop at the same step.
    for (int64_t& step = model.step(); step < steps || epoch < min_generation;) {
      // The rank's batch: a target that depends on the step and the rank; the gradient of
      // 0.5 * |w - target|^2.
      std::vector<float>& w = model.weights();
      for (int i = 0; i < dim; ++i) {
        const float target = std::sin(0.01f * static_cast<float>(step * dim + i)) +
                             0.1f * static_cast<float>(ctx.rank());
        grad[i] = w[i] - target;
      }
      absl::Status s = ctx.Allreduce("grad", grad.data(), grad.data(), troika::DataType::kFloat32,
                                     {dim}, {.op = troika::ReduceOp::kAverage})
                           .Wait();
      if (!s.ok()) return s;
      for (int i = 0; i < dim; ++i) w[i] -= 0.1f * grad[i];
      ++step;
      if (first && epoch > 1) {
        std::printf("generation %lld first step at %lld\n", static_cast<long long>(epoch),
                    static_cast<long long>(absl::ToUnixMillis(absl::Now())));
        std::fflush(stdout);
      }
      first = false;
      if (step % commit_every == 0) {
        if (absl::Status c = troika::elastic::Commit(ctx, model); !c.ok()) return c;
      }
      if (step % 10 == 0) {
        std::printf("step %lld size %d\n", static_cast<long long>(step), ctx.size());
        std::fflush(stdout);
      }
      if (step == 5 && !dir.empty() && epoch == 1) {
        const std::string path = absl::StrCat(dir, "/pid.", member);
        std::ofstream(path + ".tmp") << getpid() << "\n";
        std::rename((path + ".tmp").c_str(), path.c_str());
      }
      absl::SleepFor(absl::Milliseconds(step_ms));
    }
    return absl::OkStatus();
  });
  if (!status.ok()) {
    std::printf("error %s\n", status.ToString().c_str());
    return 3;
  }
  std::printf("done steps %lld size %d epoch %lld weights %016llx\n",
              static_cast<long long>(model.step()), size, static_cast<long long>(epoch),
              static_cast<unsigned long long>(HashBits(model.weights())));
  return absl::GetFlag(FLAGS_exit_code);
}
