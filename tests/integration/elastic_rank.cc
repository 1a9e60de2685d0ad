// troika-test-elastic-rank: a rank of an elastic job (troikarun --min-np) for elastic_test.
// Trains a linear model (ELASTIC_DIM weights, each rank's gradient from its own synthetic
// batch) through troika::elastic::Run, committing every ELASTIC_COMMIT_EVERY steps, for
// ELASTIC_STEPS steps, sleeping ELASTIC_STEP_MS per step. It writes its pid to
// $ELASTIC_DIR/pid.<TROIKA_RANK> once it has run a few steps, and prints:
//   "step S size N"                      every 10 steps
//   "restored to step S from step T at MS"   after a membership change (MS: unix time, ms)
//   "done steps S size N epoch E weights H"   at the end (H: a hash of the weights' bits)
//   "error <status>"                     and exits 3 on any other error.

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "troika/elastic.h"
#include "troika/troika.h"

namespace {

int EnvInt(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : fallback;
}

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
  explicit Model(int dim) : weights_(dim, 0.0f) { Commit(); }

  void Commit() override {
    committed_weights_ = weights_;
    committed_step_ = step_;
  }
  void Restore() override {
    std::printf("restored to step %lld from step %lld at %lld\n",
                static_cast<long long>(committed_step_), static_cast<long long>(step_),
                static_cast<long long>(absl::ToUnixMillis(absl::Now())));
    std::fflush(stdout);
    weights_ = committed_weights_;
    step_ = committed_step_;
  }
  absl::Status Sync(troika::Context& ctx) override {
    const int64_t dim = static_cast<int64_t>(weights_.size());
    troika::Handle w = ctx.Broadcast("sync/weights", weights_.data(), weights_.data(),
                                     troika::DataType::kFloat32, {dim}, 0);
    troika::Handle s = ctx.Broadcast("sync/step", &step_, &step_, troika::DataType::kInt64, {1}, 0);
    if (absl::Status status = w.Wait(); !status.ok()) return status;
    if (absl::Status status = s.Wait(); !status.ok()) return status;
    Commit();
    return absl::OkStatus();
  }

  std::vector<float>& weights() { return weights_; }
  int64_t& step() { return step_; }

 private:
  std::vector<float> weights_, committed_weights_;
  int64_t step_ = 0, committed_step_ = 0;
};

}  // namespace

int main() {
  auto options = troika::Options::FromEnvironment();
  if (!options.ok()) {
    std::printf("error %s\n", options.status().ToString().c_str());
    return 2;
  }
  const int dim = EnvInt("ELASTIC_DIM", 1024);
  const int steps = EnvInt("ELASTIC_STEPS", 200);
  const int commit_every = EnvInt("ELASTIC_COMMIT_EVERY", 10);
  const int step_ms = EnvInt("ELASTIC_STEP_MS", 10);
  const char* dir = std::getenv("ELASTIC_DIR");
  const int member = options->rank;  // TROIKA_RANK: the rank it started as
  Model model(dim);
  int size = 0;
  int64_t epoch = 0;
  std::vector<float> grad(dim);
  absl::Status status = troika::elastic::Run(*options, model, [&](troika::Context& ctx) {
    size = ctx.size();
    epoch = ctx.membership().epoch;
    for (int64_t& step = model.step(); step < steps;) {
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
      if (step % commit_every == 0) model.Commit();
      if (step % 10 == 0) {
        std::printf("step %lld size %d\n", static_cast<long long>(step), ctx.size());
        std::fflush(stdout);
      }
      if (step == 5 && dir != nullptr && epoch == 1) {
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
  return 0;
}
