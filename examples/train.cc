// troika-example-train: data-parallel training of a small MLP on synthetic data with Troika.
//
//   troikarun -np 4 -- troika-example-train --steps 50
//
// Every rank builds the same model (fixed seed) and sees the same endless data set. Each step
// takes the next `--batch` global rows; rank r computes the mean gradient over its contiguous
// shard of batch/size rows, the gradients are averaged across ranks with one named allreduce
// per parameter tensor (all submitted before any is waited for, so the coordinator can fuse
// them), and every rank applies the same SGD update. Rank 0 prints the global mean loss of
// every step ("step 12 loss 0.031234"), then a summary ("troika-example-train: done: 50 steps
// in 1.234 s (40.5 steps/s), loss 0.693147 -> 0.012345"; the time is the training loop's, from
// the first step to the last) and, with --dump_weights, the final weights. Each step is
// marked (Context::MarkStep), so the coordinator's step metrics show how the ranks spend
// their time.

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/flags_usage.h"
#include "examples/mlp.h"
#include "examples/synthetic_data.h"
#include "troika/troika.h"

ABSL_FLAG(int, steps, 50, "number of SGD steps");
ABSL_FLAG(int, batch, 256, "global batch size in rows; must be a multiple of the number of ranks");
ABSL_FLAG(double, lr, 0.1, "learning rate");
ABSL_FLAG(std::string, dump_weights, "",
          "if set, rank 0 writes the final weights to this file, one float per line "
          "(fc1.weight, fc1.bias, fc2.weight, fc2.bias, row-major)");

namespace {

using troika::examples::Mlp;
using troika::examples::SyntheticDataset;

constexpr uint64_t kModelSeed = 1234;
constexpr uint64_t kDataSeed = 5678;

struct TrainOptions {
  int steps = 0;
  int batch = 0;
  float lr = 0;
  std::string dump_weights;
};

absl::Status DumpWeights(const Mlp& model, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  bool ok = true;
  for (const troika::examples::Tensor& t : model.params()) {
    // %.9g round-trips every float exactly.
    for (float v : t.values) ok = ok && std::fprintf(f, "%.9g\n", v) > 0;
  }
  if (std::fclose(f) != 0 || !ok)
    return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// One step's gradient exchange: averages `grads` in place and returns the global mean loss.
absl::StatusOr<double> AverageAcrossRanks(troika::Context& troika, const Mlp& model,
                                          std::vector<std::vector<float>>& grads,
                                          double local_loss) {
  troika::AllreduceOptions average{.op = troika::ReduceOp::kAverage};
  std::vector<troika::Handle> handles;
  for (size_t p = 0; p < grads.size(); ++p) {
    const troika::examples::Tensor& param = model.params()[p];
    handles.push_back(troika.Allreduce("grad/" + param.name, grads[p].data(), grads[p].data(),
                                       troika::DataType::kFloat32, param.shape, average));
  }
  double loss = local_loss;
  handles.push_back(
      troika.Allreduce("loss", &loss, &loss, troika::DataType::kFloat64, {1}, average));
  // Every handle is waited for, even after a failure: the buffers must outlive the ops.
  absl::Status status;
  for (const troika::Handle& h : handles) status.Update(h.Wait());
  if (!status.ok()) return status;
  return loss;
}

absl::Status Train(const TrainOptions& options) {
  absl::StatusOr<troika::Options> troika_options = troika::Options::FromEnvironment();
  if (!troika_options.ok()) return troika_options.status();
  absl::StatusOr<std::unique_ptr<troika::Context>> troika = troika::Context::Init(*troika_options);
  if (!troika.ok()) return troika.status();
  const int rank = (*troika)->rank();
  const int size = (*troika)->size();
  if (options.batch <= 0 || options.batch % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch=", options.batch, " must be a positive multiple of the ", size, " ranks"));
  }
  const int shard = options.batch / size;
  if (rank == 0) {
    std::printf("troika-example-train: %d ranks, global batch %d (%d per rank), %d steps, lr %g\n",
                size, options.batch, shard, options.steps, options.lr);
  }
  Mlp model(kModelSeed);
  const SyntheticDataset data(kDataSeed);
  std::vector<float> x, y;
  std::vector<std::vector<float>> grads;
  double first_loss = 0, last_loss = 0;
  const absl::Time start = absl::Now();
  for (int step = 1; step <= options.steps; ++step) {
    (*troika)->MarkStep();  // ends the previous step (if any), starts this one
    const int64_t first = static_cast<int64_t>(step - 1) * options.batch + rank * shard;
    data.Rows(first, shard, x, y);
    const double local_loss = model.LossAndGradients(x.data(), y.data(), shard, grads);
    absl::StatusOr<double> loss = AverageAcrossRanks(**troika, model, grads, local_loss);
    if (!loss.ok()) return loss.status();
    model.Step(grads, options.lr);
    if (step == 1) first_loss = *loss;
    last_loss = *loss;
    if (rank == 0) {
      std::printf("step %d loss %.6f\n", step, *loss);
      std::fflush(stdout);
    }
  }
  if (options.steps > 0) (*troika)->EndStep();  // the last step
  if (rank == 0) {
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    std::printf("troika-example-train: done: %d steps in %.3f s (%.1f steps/s)", options.steps,
                seconds, seconds > 0 ? options.steps / seconds : 0.0);
    if (options.steps > 0) std::printf(", loss %.6f -> %.6f", first_loss, last_loss);
    std::printf("\n");
    std::fflush(stdout);
  }
  if (rank == 0 && !options.dump_weights.empty()) {
    if (absl::Status s = DumpWeights(model, options.dump_weights); !s.ok()) return s;
  }
  return (*troika)->Shutdown();
}

}  // namespace

int main(int argc, char** argv) {
  troika::ShowFlagsOf("examples/train.cc");
  absl::SetProgramUsageMessage(
      "Data-parallel training of a small MLP on synthetic data with Troika.\n"
      "Usage: troikarun -np N -- troika-example-train [--steps 50] [--batch 256] [--lr 0.1] "
      "[--dump_weights FILE]");
  troika::HandleHelp(argc, argv);
  absl::ParseCommandLine(argc, argv);
  TrainOptions options{absl::GetFlag(FLAGS_steps), absl::GetFlag(FLAGS_batch),
                       static_cast<float>(absl::GetFlag(FLAGS_lr)),
                       absl::GetFlag(FLAGS_dump_weights)};
  if (options.steps < 0) {
    std::fprintf(stderr, "troika-example-train: --steps must be >= 0\n");
    return 2;
  }
  absl::Status status = Train(options);
  if (!status.ok()) {
    std::fprintf(stderr, "troika-example-train: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
