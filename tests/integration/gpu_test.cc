// The GPU data plane end to end: a real coordinator, a rank whose tensors live in CUDA device
// memory, NCCL underneath (world size 1 — one GPU allows one rank per communicator). Every
// operation, every reduce op, fusion, compression, stream ordering and the errors. Needs a
// CUDA device; skips with the reason without one.

#include <cuda_runtime.h>

#include <cmath>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libclient/transport/reduce.h"
#include "tests/integration/test_cluster.h"
#include "tests/no_gpu.h"

namespace troika::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(bytes(), 1)), cudaSuccess);
    if (bytes() > 0) {
      EXPECT_EQ(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceBuffer() { cudaFree(data_); }
  T* get() const { return static_cast<T*>(data_); }
  size_t bytes() const { return size_ * sizeof(T); }
  std::vector<T> Read() const { return ReadDevice<T>(data_, size_); }

  template <typename U>
  static std::vector<U> ReadDevice(const void* p, size_t n) {
    std::vector<U> out(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (n > 0) {
      EXPECT_EQ(cudaMemcpy(out.data(), p, n * sizeof(U), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return out;
  }

 private:
  void* data_ = nullptr;
  size_t size_;
};

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = NoGpu(); !why.empty()) GTEST_SKIP() << why;
    cluster_ = std::make_unique<TestCluster>();
    auto contexts = cluster_->Join("gpu", 1);
    ASSERT_EQ(contexts.size(), 1u);
    ctx_ = std::move(contexts[0]);
    ASSERT_NE(ctx_, nullptr);
  }
  void TearDown() override {
    if (ctx_) {
      EXPECT_TRUE(ctx_->Shutdown().ok());
    }
  }

  static AllreduceOptions OnGpu(ReduceOp op = ReduceOp::kSum) {
    AllreduceOptions o;
    o.op = op;
    o.device.ordinal = 0;
    return o;
  }
  static OpOptions Gpu() {
    OpOptions o;
    o.device.ordinal = 0;
    return o;
  }

  std::unique_ptr<TestCluster> cluster_;
  std::unique_ptr<Context> ctx_;
};

TEST_F(GpuTest, AllreduceEveryReduceOpWithScaling) {
  const std::vector<float> input = {1.5f, -2.0f, 3.0f, 8.0f, 0.25f};
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    DeviceBuffer<float> in(input);
    DeviceBuffer<float> out(std::vector<float>(input.size(), 0.0f));
    AllreduceOptions o = OnGpu(op);
    o.prescale = 2.0;
    o.postscale = 0.5;
    ASSERT_TRUE(ctx_->Allreduce(std::string("t") + ReduceOpName(op), in.get(), out.get(),
                                DataType::kFloat32, {5}, o)
                    .Wait()
                    .ok());
    // One rank: every op is the identity, so the result is input * prescale * postscale.
    EXPECT_EQ(out.Read(), input) << ReduceOpName(op);
    EXPECT_EQ(in.Read(), input) << "the input is untouched";
  }
}

TEST_F(GpuTest, IntegerAverageAndInPlace) {
  const std::vector<int32_t> input = {7, -7, 100, 3};
  DeviceBuffer<int32_t> data(input);
  AllreduceOptions o = OnGpu(ReduceOp::kAverage);
  o.postscale = 3.0;
  ASSERT_TRUE(ctx_->Allreduce("int", data.get(), data.get(), DataType::kInt32, {4}, o).Wait().ok());
  EXPECT_THAT(data.Read(), ElementsAre(21, -21, 300, 9));
}

// int16 and uint16 travel through NCCL as int32; bool as bytes with max (or) and min (and).
TEST_F(GpuTest, SixteenBitIntegersAndBool) {
  const std::vector<int16_t> shorts = {-7, 32767, 9, -32768};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    DeviceBuffer<int16_t> data(shorts);
    ASSERT_TRUE(ctx_->Allreduce(std::string("i16") + ReduceOpName(op), data.get(), data.get(),
                                DataType::kInt16, {4}, OnGpu(op))
                    .Wait()
                    .ok());
    EXPECT_EQ(data.Read(), shorts) << ReduceOpName(op);  // one rank: the identity
  }
  DeviceBuffer<int16_t> averaged(shorts);
  AllreduceOptions avg = OnGpu(ReduceOp::kAverage);
  avg.postscale = 0.5;
  ASSERT_TRUE(ctx_->Allreduce("i16avg", averaged.get(), averaged.get(), DataType::kInt16, {4}, avg)
                  .Wait()
                  .ok());
  EXPECT_THAT(averaged.Read(), ElementsAre(-3, 16383, 4, -16384));
  const std::vector<uint16_t> ushorts = {65535, 0, 40000, 1};
  DeviceBuffer<uint16_t> u(ushorts);
  DeviceBuffer<uint16_t> u_out(std::vector<uint16_t>(4, 7));
  ASSERT_TRUE(
      ctx_->Allreduce("u16", u.get(), u_out.get(), DataType::kUint16, {4}, OnGpu(ReduceOp::kMax))
          .Wait()
          .ok());
  EXPECT_EQ(u_out.Read(), ushorts);
  Handle rs = ctx_->Reducescatter("u16rs", u.get(), DataType::kUint16, {4}, OnGpu());
  ASSERT_TRUE(rs.Wait().ok());
  EXPECT_EQ(DeviceBuffer<uint16_t>::ReadDevice<uint16_t>(rs.output(), 4), ushorts);
  const std::vector<uint8_t> flags = {0, 1, 1, 0};
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
    DeviceBuffer<uint8_t> b(flags);
    ASSERT_TRUE(ctx_->Allreduce(std::string("b") + ReduceOpName(op), b.get(), b.get(),
                                DataType::kBool, {4}, OnGpu(op))
                    .Wait()
                    .ok());
    EXPECT_EQ(b.Read(), flags) << ReduceOpName(op);
  }
  DeviceBuffer<uint8_t> b(flags);
  absl::Status s =
      ctx_->Allreduce("bavg", b.get(), b.get(), DataType::kBool, {4}, OnGpu(ReduceOp::kAverage))
          .Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("average is not defined for bool"));
}

TEST_F(GpuTest, ManyTensorsFuseAndCompressionRoundTrips) {
  // 200 tensors of varied sizes submitted together: fused, packed and unpacked by the batched
  // kernels; half of the rounds compressed.
  for (Compression compression :
       {Compression::kNone, Compression::kFloat16, Compression::kBFloat16}) {
    std::vector<std::unique_ptr<DeviceBuffer<float>>> buffers;
    std::vector<std::vector<float>> inputs;
    std::vector<GroupTensor> tensors;
    for (int i = 0; i < 200; ++i) {
      std::vector<float> v(1 + i * 3);
      for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>((i + j) % 17) - 8.0f;
      inputs.push_back(v);
      buffers.push_back(std::make_unique<DeviceBuffer<float>>(v));
      tensors.push_back({"g" + std::to_string(i),
                         buffers.back()->get(),
                         buffers.back()->get(),
                         DataType::kFloat32,
                         {static_cast<int64_t>(v.size())}});
    }
    AllreduceOptions o = OnGpu(ReduceOp::kAverage);
    o.compression = compression;
    for (Handle& h :
         ctx_->GroupedAllreduce(std::string("fused-") + CompressionName(compression), tensors, o)) {
      ASSERT_TRUE(h.Wait().ok());
    }
    // Small integers are exact in float16 and bfloat16 alike.
    for (int i = 0; i < 200; ++i) EXPECT_EQ(buffers[i]->Read(), inputs[i]) << i;
  }
}

TEST_F(GpuTest, CompressionRoundsLikeTheWireType) {
  DeviceBuffer<float> data(std::vector<float>{1.0009765625f + 0.0001f, 3.14159265f});
  AllreduceOptions o = OnGpu();
  o.compression = Compression::kFloat16;
  ASSERT_TRUE(
      ctx_->Allreduce("pi", data.get(), data.get(), DataType::kFloat32, {2}, o).Wait().ok());
  std::vector<float> got = data.Read();
  EXPECT_EQ(got[0], transport::HalfToFloat(transport::FloatToHalf(1.0009765625f + 0.0001f)));
  EXPECT_EQ(got[1], transport::HalfToFloat(transport::FloatToHalf(3.14159265f)));
}

TEST_F(GpuTest, AllgatherBroadcastAlltoallReducescatter) {
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6};  // shape {3, 2}
  DeviceBuffer<float> in(rows);
  Handle gathered = ctx_->Allgather("ag", in.get(), DataType::kFloat32, {3, 2}, Gpu());
  ASSERT_TRUE(gathered.Wait().ok());
  EXPECT_THAT(gathered.output_shape(), ElementsAre(3, 2));
  EXPECT_EQ(DeviceBuffer<float>::ReadDevice<float>(gathered.output(), 6), rows);

  DeviceBuffer<float> out(std::vector<float>(6, 0.0f));
  ASSERT_TRUE(
      ctx_->Broadcast("bc", in.get(), out.get(), DataType::kFloat32, {3, 2}, 0, Gpu()).Wait().ok());
  EXPECT_EQ(out.Read(), rows);

  Handle a2a = ctx_->Alltoall("a2a", in.get(), DataType::kFloat32, {3, 2}, {3}, Gpu());
  ASSERT_TRUE(a2a.Wait().ok());
  EXPECT_THAT(a2a.received_splits(), ElementsAre(3));
  EXPECT_EQ(DeviceBuffer<float>::ReadDevice<float>(a2a.output(), 6), rows);

  AllreduceOptions avg = OnGpu(ReduceOp::kAverage);
  avg.postscale = 2.0;
  Handle rs = ctx_->Reducescatter("rs", in.get(), DataType::kFloat32, {3, 2}, avg);
  ASSERT_TRUE(rs.Wait().ok());
  EXPECT_THAT(rs.output_shape(), ElementsAre(3, 2));
  EXPECT_THAT(DeviceBuffer<float>::ReadDevice<float>(rs.output(), 6),
              ElementsAre(2, 4, 6, 8, 10, 12));
}

TEST_F(GpuTest, ResultsIntoTheCallersDeviceBuffer) {
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6};  // shape {3, 2}
  DeviceBuffer<float> in(rows);
  DeviceBuffer<float> out(std::vector<float>(8, -1.0f));  // two floats to spare
  Handle gathered = ctx_->AllgatherInto("ag-into", in.get(), out.get(), out.bytes(),
                                        DataType::kFloat32, {3, 2}, Gpu());
  ASSERT_TRUE(gathered.Wait().ok());
  EXPECT_EQ(gathered.output(), out.get());
  EXPECT_EQ(gathered.output_bytes(), 6 * sizeof(float));
  EXPECT_THAT(out.Read(), ElementsAre(1, 2, 3, 4, 5, 6, -1, -1));

  Handle a2a = ctx_->AlltoallInto("a2a-into", in.get(), out.get(), out.bytes(), DataType::kFloat32,
                                  {3, 2}, {3}, Gpu());
  ASSERT_TRUE(a2a.Wait().ok());
  EXPECT_THAT(out.Read(), ElementsAre(1, 2, 3, 4, 5, 6, -1, -1));

  DeviceBuffer<float> small(std::vector<float>(5, -1.0f));
  Handle rs = ctx_->ReducescatterInto("rs-into", in.get(), small.get(), small.bytes(),
                                      DataType::kFloat32, {3, 2}, OnGpu());
  absl::Status s = rs.Wait();
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_EQ(rs.output(), nullptr);
  EXPECT_THAT(small.Read(), ElementsAre(-1, -1, -1, -1, -1));  // untouched
  // The job goes on.
  ASSERT_TRUE(ctx_->Allgather("after", in.get(), DataType::kFloat32, {3, 2}, Gpu()).Wait().ok());
}

// Holds a stream at the point it is made until opened: work queued there afterwards waits for
// Open() (a host function blocked on a future). Opens when it goes.
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t stream) : opened_(open_.get_future().share()) {
    EXPECT_EQ(
        cudaLaunchHostFunc(
            stream, [](void* f) { static_cast<std::shared_future<void>*>(f)->wait(); }, &opened_),
        cudaSuccess);
  }
  ~StreamGate() { Open(); }
  void Open() {
    if (!is_open_) open_.set_value();
    is_open_ = true;
  }

 private:
  std::promise<void> open_;
  std::shared_future<void> opened_;
  bool is_open_ = false;
};

// The input is written on `producer` behind a closed gate: the operation (ready stream
// `ready`, the producer or the legacy default stream's name for it) must not finish before the
// gate opens, and must see the input then.
void ExpectTheOperationWaitsForItsProducer(Context& ctx, cudaStream_t producer, void* ready) {
  const size_t n = 1 << 20;
  DeviceBuffer<float> ones(std::vector<float>(n, 1.0f));
  DeviceBuffer<float> data(std::vector<float>(n, 0.0f));
  cudaStream_t consumer;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  {
    StreamGate gate(producer);
    ASSERT_EQ(cudaMemcpyAsync(data.get(), ones.get(), n * 4, cudaMemcpyDeviceToDevice, producer),
              cudaSuccess);
    AllreduceOptions o;
    o.device.ordinal = 0;
    o.postscale = 3.0;
    o.device.ready_stream = ready;
    Handle h = ctx.Allreduce("streamed", data.get(), data.get(), DataType::kFloat32,
                             {static_cast<int64_t>(n)}, o);
    EXPECT_EQ(h.WaitFor(absl::Milliseconds(300)).code(), absl::StatusCode::kDeadlineExceeded)
        << "finished before its input was written";
    ASSERT_TRUE(h.WaitOnStream(consumer).ok());
    gate.Open();
    std::vector<float> back(n);
    ASSERT_EQ(cudaMemcpyAsync(back.data(), data.get(), n * 4, cudaMemcpyDeviceToHost, consumer),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
    EXPECT_EQ(back, std::vector<float>(n, 3.0f));
    EXPECT_TRUE(h.Wait().ok());
  }
  cudaStreamDestroy(consumer);
}

TEST_F(GpuTest, WaitsForTheProducerStreamAndHandsAnEventToTheConsumer) {
  // The communicator first: its set-up must not be what holds the operation back.
  DeviceBuffer<float> warm(std::vector<float>(4, 1.0f));
  ASSERT_TRUE(ctx_->Allreduce("warm", warm.get(), warm.get(), DataType::kFloat32, {4}, OnGpu())
                  .Wait()
                  .ok());
  cudaStream_t producer;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  ExpectTheOperationWaitsForItsProducer(*ctx_, producer, producer);
  cudaStreamDestroy(producer);
  // The legacy default stream is named cudaStreamLegacy (a null ready_stream means none).
  ExpectTheOperationWaitsForItsProducer(*ctx_, cudaStreamLegacy, cudaStreamLegacy);
}

// A ready stream is marked when the operation is submitted: what the caller queues there later
// (the rest of a backward pass) is not waited for. Here the later work holds the stream until
// the operation finished, so one that waited for it would never finish.
TEST_F(GpuTest, WorkQueuedOnTheReadyStreamAfterSubmissionIsNotWaitedFor) {
  cudaStream_t producer;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<float> twos(1024, 2.0f);
  DeviceBuffer<float> source(twos);
  DeviceBuffer<float> data(std::vector<float>(1024, 0.0f));
  ASSERT_EQ(
      cudaMemcpyAsync(data.get(), source.get(), data.bytes(), cudaMemcpyDeviceToDevice, producer),
      cudaSuccess);
  AllreduceOptions o = OnGpu();
  o.device.ready_stream = producer;
  Handle h = ctx_->Allreduce("marked", data.get(), data.get(), DataType::kFloat32, {1024}, o);
  StreamGate later(producer);
  const absl::Status s = h.WaitFor(absl::Seconds(5));
  later.Open();
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(cudaStreamSynchronize(producer), cudaSuccess);
  EXPECT_EQ(data.Read(), twos);
  cudaStreamDestroy(producer);
}

TEST_F(GpuTest, CpuAndGpuTensorsAreKeptApartAndValidated) {
  // Host and device allreduces submitted together run correctly side by side (never fused).
  std::vector<float> host(4, 2.0f);
  DeviceBuffer<float> device(std::vector<float>(4, 5.0f));
  Handle a = ctx_->Allreduce("host", host.data(), host.data(), DataType::kFloat32, {4});
  Handle b =
      ctx_->Allreduce("device", device.get(), device.get(), DataType::kFloat32, {4}, OnGpu());
  ASSERT_TRUE(a.Wait().ok());
  ASSERT_TRUE(b.Wait().ok());
  EXPECT_EQ(host, std::vector<float>(4, 2.0f));
  EXPECT_EQ(device.Read(), std::vector<float>(4, 5.0f));
  // One device per rank.
  AllreduceOptions other = OnGpu();
  other.device.ordinal = 1;
  int count = 0;
  cudaGetDeviceCount(&count);
  absl::Status s =
      ctx_->Allreduce("other", device.get(), device.get(), DataType::kFloat32, {4}, other).Wait();
  EXPECT_EQ(s.code(),
            count > 1 ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kFailedPrecondition)
      << s;
}

TEST(GpuJobTest, DeviceClassMismatchAcrossRanksIsAnErrorOnEveryRank) {
  if (const std::string why = NoGpu(); !why.empty()) GTEST_SKIP() << why;
  // No NCCL communicator is ever created (the coordinator rejects the op), so two ranks can
  // share one GPU here.
  TestCluster cluster;
  auto contexts = cluster.Join("mixed", 2);
  ASSERT_EQ(contexts.size(), 2u);
  DeviceBuffer<float> device(std::vector<float>(4, 1.0f));
  std::vector<float> host(4, 1.0f);
  AllreduceOptions gpu;
  gpu.device.ordinal = 0;
  Handle h0 = contexts[0]->Allreduce("x", device.get(), device.get(), DataType::kFloat32, {4}, gpu);
  Handle h1 = contexts[1]->Allreduce("x", host.data(), host.data(), DataType::kFloat32, {4});
  for (Handle* h : {&h0, &h1}) {
    absl::Status s = h->Wait();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.message(), HasSubstr("device classes for 'x': rank 0 sent gpu, rank 1 sent cpu"));
  }
}

// Steady-state schedules (docs/protocol.md, Schedules) take GPU allreduces: once the steps
// repeat, they run without a coordinator round trip (the host votes, then the collective is
// issued on the device), in collectives apart from the step's host allreduce, with the
// results of the negotiated steps.
TEST(GpuJobTest, RepeatedStepsRunAScheduleOfGpuAndHostAllreduces) {
  if (const std::string why = NoGpu(); !why.empty()) GTEST_SKIP() << why;
  coordinator::CoordinatorOptions options;
  options.registry.job.schedules = true;
  TestCluster cluster(options);
  auto contexts = cluster.Join("scheduled", 1);
  ASSERT_EQ(contexts.size(), 1u);
  Context& ctx = *contexts[0];
  auto job = cluster.coordinator().registry().Find("scheduled");
  ASSERT_TRUE(job.ok()) << job.status();
  // Small integers: exact in float16, so the compressed tensor's result is its input too.
  const std::vector<std::vector<float>> inputs = {{1, -2, 3}, {4, 5}, {-6, 7, 8, 9}};
  std::vector<std::unique_ptr<DeviceBuffer<float>>> outs;
  std::vector<std::unique_ptr<DeviceBuffer<float>>> ins;
  for (const std::vector<float>& v : inputs) {
    ins.push_back(std::make_unique<DeviceBuffer<float>>(v));
    outs.push_back(std::make_unique<DeviceBuffer<float>>(std::vector<float>(v.size(), 0)));
  }
  auto step = [&](int s) {
    std::vector<Handle> handles;
    for (size_t t = 0; t < inputs.size(); ++t) {
      AllreduceOptions o;
      o.op = ReduceOp::kAverage;
      o.device.ordinal = 0;
      if (t == 2) o.compression = Compression::kFloat16;
      handles.push_back(ctx.Allreduce("grad" + std::to_string(t), ins[t]->get(), outs[t]->get(),
                                      DataType::kFloat32, {static_cast<int64_t>(inputs[t].size())},
                                      o));
    }
    double loss = s, reduced = -1;
    handles.push_back(ctx.Allreduce("loss", &loss, &reduced, DataType::kFloat64, {1}));
    for (Handle& h : handles) ASSERT_TRUE(h.Wait().ok()) << "step " << s;
    EXPECT_EQ(reduced, loss) << "step " << s;
    for (size_t t = 0; t < inputs.size(); ++t) {
      EXPECT_EQ(outs[t]->Read(), inputs[t]) << "step " << s << ", grad" << t;
      ASSERT_EQ(cudaMemset(outs[t]->get(), 0, outs[t]->bytes()), cudaSuccess);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the memsets before the next step
  };
  // Three scheduled collectives: grad0 and grad1 (fused by negotiation, or bucketed once the
  // rank's reports show it), the compressed grad2 (fused with no other), the host's loss.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  int s = 0;
  coordinator::ScheduleInfo info;
  for (; absl::Now() < deadline; ++s) {
    step(s);
    info = (*job)->Describe().schedules;
    if (info.active != 0 && info.entries == 3) break;
  }
  ASSERT_TRUE(info.active != 0 && info.entries == 3)
      << "no schedule of 3 collectives formed in " << s << " steps (in force: " << info.active
      << ", " << info.entries << " entries)";
  EXPECT_EQ(info.tensors, 4);
  const int64_t before = cluster.coordinator().control_stats().up_messages.load();
  for (int i = 0; i < 10; ++i) step(++s);
  // Negotiated, 10 steps send at least 10 requests; scheduled, none (a step-timing report
  // may still go up).
  EXPECT_LT(cluster.coordinator().control_stats().up_messages.load() - before, 2);
  EXPECT_EQ((*job)->Describe().schedules.active, info.active) << "the schedule ended";
  EXPECT_TRUE(ctx.Shutdown().ok());
}

}  // namespace
}  // namespace troika::testing
