// troika-bench --device=cuda (see device_bench.h).

#include "bench/device_bench.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/report.h"
#include "libclient/cuda/copy_kernels.h"
#include "troika/troika.h"

namespace troika::bench {
namespace {

#define BENCH_CUDA(call)                                                            \
  do {                                                                              \
    if (cudaError_t e = (call); e != cudaSuccess) {                                 \
      return absl::InternalError(absl::StrCat(#call, ": ", cudaGetErrorString(e))); \
    }                                                                               \
  } while (0)

// Seconds per call of `body` (which queues work on `stream`), timed with CUDA events over
// enough iterations to last ~200 ms, after a warm-up.
template <typename Body>
absl::StatusOr<double> TimeOnStream(cudaStream_t stream, Body body) {
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  int iterations = 1;
  double seconds = 0;
  for (;;) {
    for (int i = 0; i < 3; ++i) body();  // warm-up
    BENCH_CUDA(cudaEventRecord(start, stream));
    for (int i = 0; i < iterations; ++i) body();
    BENCH_CUDA(cudaEventRecord(stop, stream));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    seconds = ms / 1e3;
    if (seconds > 0.2 || iterations >= (1 << 16)) break;
    iterations *= 4;
  }
  BENCH_CUDA(cudaGetLastError());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return seconds / iterations;
}

struct PackFigures {
  double copy_gbps;    // cudaMemcpyAsync device to device, bytes read + written per second
  double pack_gbps;    // pack + unpack, bytes read + written per second
  double packed_gbps;  // the same with float16 compression
};

// 64 float32 tensors of 1 MiB each (64 MiB) packed into one buffer and unpacked again, against
// two device-to-device copies of the same 64 MiB.
absl::StatusOr<PackFigures> MeasurePacking(cudaStream_t stream) {
  constexpr int kTensors = 64;
  constexpr size_t kTensorBytes = size_t{1} << 20;
  constexpr size_t kTotal = kTensors * kTensorBytes;
  std::vector<void*> tensors(kTensors);
  for (void*& p : tensors) BENCH_CUDA(cudaMalloc(&p, kTensorBytes));
  void *fused = nullptr, *a = nullptr, *b = nullptr;
  BENCH_CUDA(cudaMalloc(&fused, kTotal));
  BENCH_CUDA(cudaMalloc(&a, kTotal));
  BENCH_CUDA(cudaMalloc(&b, kTotal));
  std::vector<cuda::CopyItem> pack, unpack;
  for (int i = 0; i < kTensors; ++i) {
    const size_t count = kTensorBytes / 4;
    pack.push_back({tensors[i], static_cast<uint8_t*>(fused) + i * kTensorBytes, count});
    unpack.push_back({static_cast<uint8_t*>(fused) + i * kTensorBytes, tensors[i], count});
  }
  std::vector<cuda::CopyItem> pack16, unpack16;
  for (int i = 0; i < kTensors; ++i) {
    const size_t count = kTensorBytes / 4;
    pack16.push_back({tensors[i], static_cast<uint8_t*>(fused) + i * kTensorBytes / 2, count});
    unpack16.push_back({static_cast<uint8_t*>(fused) + i * kTensorBytes / 2, tensors[i], count});
  }
  const cuda::CopyTransform same{DataType::kFloat32, DataType::kFloat32, 1.0, 1};
  const cuda::CopyTransform to16{DataType::kFloat32, DataType::kFloat16, 1.0, 1};
  const cuda::CopyTransform from16{DataType::kFloat16, DataType::kFloat32, 1.0, 1};
  auto copy = TimeOnStream(stream, [&] {
    cudaMemcpyAsync(b, a, kTotal, cudaMemcpyDeviceToDevice, stream);
    cudaMemcpyAsync(a, b, kTotal, cudaMemcpyDeviceToDevice, stream);
  });
  auto packing = TimeOnStream(stream, [&] {
    cuda::BatchedCopy(pack.data(), kTensors, same, stream);
    cuda::BatchedCopy(unpack.data(), kTensors, same, stream);
  });
  auto packing16 = TimeOnStream(stream, [&] {
    cuda::BatchedCopy(pack16.data(), kTensors, to16, stream);
    cuda::BatchedCopy(unpack16.data(), kTensors, from16, stream);
  });
  for (void* p : tensors) cudaFree(p);
  cudaFree(fused);
  cudaFree(a);
  cudaFree(b);
  if (!copy.ok()) return copy.status();
  if (!packing.ok()) return packing.status();
  if (!packing16.ok()) return packing16.status();
  // Each iteration reads and writes kTotal bytes twice (float16: 1.5x kTotal each way).
  return PackFigures{4.0 * kTotal / *copy / 1e9, 4.0 * kTotal / *packing / 1e9,
                     3.0 * kTotal / *packing16 / 1e9};
}

struct LatencyFigures {
  double raw_us;     // ncclAllReduce + stream synchronize
  double troika_us;  // Context::Allreduce + Handle::Wait
};

// A 4-byte float32 allreduce on one rank: the cost Troika adds per operation (submission,
// negotiation with the coordinator, launch, completion) over NCCL's own.
absl::StatusOr<LatencyFigures> MeasureLatency(const DeviceBenchOptions& options,
                                              cudaStream_t stream) {
  void* value = nullptr;
  BENCH_CUDA(cudaMalloc(&value, 4));
  BENCH_CUDA(cudaMemset(value, 0, 4));
  ncclUniqueId id;
  ncclComm_t comm;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
    return absl::UnavailableError("creating a one-rank NCCL communicator failed");
  }
  auto time_per_op = [](auto op) {
    for (int i = 0; i < 100; ++i) op();
    int iterations = 100;
    for (;;) {
      const absl::Time start = absl::Now();
      for (int i = 0; i < iterations; ++i) op();
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      if (seconds > 0.3 || iterations >= (1 << 20)) return seconds / iterations;
      iterations *= 4;
    }
  };
  const double raw = time_per_op([&] {
    ncclAllReduce(value, value, 1, ncclFloat32, ncclSum, comm, stream);
    cudaStreamSynchronize(stream);
  });
  ncclCommDestroy(comm);

  Options o;
  o.coordinator = options.coordinator;
  o.job = options.job;
  o.rank = 0;
  o.size = 1;
  o.host = "localhost";
  o.plaintext = true;  // troika-bench's embedded coordinator, on loopback
  auto context = Context::Init(o);
  if (!context.ok()) return context.status();
  AllreduceOptions gpu;
  gpu.device.ordinal = 0;
  cudaGetDevice(&gpu.device.ordinal);
  absl::Status failure;
  const double troika = time_per_op([&] {
    absl::Status s =
        (*context)->Allreduce("latency", value, value, DataType::kFloat32, {1}, gpu).Wait();
    if (!s.ok() && failure.ok()) failure = s;
  });
  (*context)->Shutdown().IgnoreError();
  cudaFree(value);
  if (!failure.ok()) return failure;
  return LatencyFigures{raw * 1e6, troika * 1e6};
}

}  // namespace

absl::Status RunDeviceBenchmark(const DeviceBenchOptions& options, std::FILE* out) {
  int device = 0;
  cudaDeviceProp prop;
  BENCH_CUDA(cudaGetDevice(&device));
  BENCH_CUDA(cudaGetDeviceProperties(&prop, device));
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::fprintf(out,
               "troika-bench --device=cuda: GPU %d, %s, CUDA runtime, NCCL %d.%d.%d, repeat %d\n",
               device, prop.name, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, options.repeat);
  std::vector<double> copy, pack, pack16, raw, troika;
  for (int r = 0; r < options.repeat; ++r) {
    auto p = MeasurePacking(stream);
    if (!p.ok()) return p.status();
    copy.push_back(p->copy_gbps);
    pack.push_back(p->pack_gbps);
    pack16.push_back(p->packed_gbps);
    auto l = MeasureLatency(options, stream);
    if (!l.ok()) return l.status();
    raw.push_back(l->raw_us);
    troika.push_back(l->troika_us);
  }
  cudaStreamDestroy(stream);
  const double c = Median(copy), p = Median(pack), p16 = Median(pack16);
  std::fprintf(out,
               "pack+unpack, 64 float32 tensors x 1 MiB (bytes read+written per second, "
               "medians):\n"
               "  device-to-device cudaMemcpy  %8.1f GB/s\n"
               "  batched pack+unpack          %8.1f GB/s  (%.2f of memcpy; target >= 0.80)\n"
               "  same, float16 on the wire    %8.1f GB/s  (%.2f of memcpy)\n",
               c, p, p / c, p16, p16 / c);
  const double rl = Median(raw), tl = Median(troika);
  std::fprintf(out,
               "small allreduce (4 bytes, 1 rank, submit to completion, medians):\n"
               "  raw ncclAllReduce + sync     %8.1f us\n"
               "  troika Allreduce + Wait      %8.1f us  (+%.1f us per op, %.1fx)\n",
               rl, tl, tl - rl, tl / rl);
  return absl::OkStatus();
}

}  // namespace troika::bench
