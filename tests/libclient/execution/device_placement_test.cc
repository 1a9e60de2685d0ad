// DevicePlacement: host entries stay on the host; a GPU entry needs a device plane and a usable
// device, one per rank; it gets the compression asked for, else the default for float32
// allreduces only; and what its device waits for: the caller's event, or its stream marked
// at submission.

#include "libclient/execution/device_placement.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace troika::internal {
namespace {

// Usable devices 0 and 1; MarkStream marks streams of device 0 and returns null for others
// (the submitting thread's current device is another).
class FakePlane : public DevicePlane {
 public:
  absl::Status CheckDevice(int ordinal) override {
    if (ordinal <= 1) return absl::OkStatus();
    return absl::FailedPreconditionError("no CUDA device " + std::to_string(ordinal));
  }
  absl::StatusOr<std::shared_ptr<void>> MarkStream(int ordinal, void* stream) override {
    ++marked;
    if (stream == &broken_stream) return absl::InternalError("cudaEventRecord failed");
    if (ordinal != 0) return std::shared_ptr<void>();
    return std::shared_ptr<void>(&event, [](void*) {});
  }
  absl::Status Launch(const Response&, const DeviceGroup&, std::vector<Entry>&) override {
    return absl::OkStatus();
  }
  void DropGroup(int) override {}
  void Abort() override {}
  void Stop() override {}

  int marked = 0;
  int event = 0;
  int broken_stream = 0;
};

Entry MakeEntry(const std::string& name, CollectiveType type = CollectiveType::kAllreduce,
                DataType dtype = DataType::kFloat32) {
  Entry entry;
  entry.request.name = name;
  entry.request.type = type;
  entry.request.dtype = dtype;
  entry.request.shape = {4};
  entry.state = std::make_shared<OpState>();
  return entry;
}

Device Gpu(int ordinal) {
  Device device;
  device.ordinal = ordinal;
  return device;
}

class DevicePlacementTest : public ::testing::Test {
 protected:
  DevicePlacementTest() {
    auto plane = std::make_unique<FakePlane>();
    plane_ = plane.get();
    placement_ = std::make_unique<DevicePlacement>(std::move(plane), Compression::kFloat16);
  }

  FakePlane* plane_;
  std::unique_ptr<DevicePlacement> placement_;
};

TEST_F(DevicePlacementTest, AHostEntryStaysOnTheHostWithTheCompressionAsked) {
  Entry entry = MakeEntry("grad");
  ASSERT_TRUE(placement_->Place(entry, Device{}, std::nullopt).ok());
  EXPECT_EQ(entry.request.device, DeviceClass::kCpu);
  EXPECT_EQ(entry.request.compression, Compression::kNone) << "no default on the host";
  EXPECT_EQ(entry.device, -1);
  EXPECT_FALSE(entry.state->on_device);
  Entry asked = MakeEntry("grad2");
  ASSERT_TRUE(placement_->Place(asked, Device{}, Compression::kBFloat16).ok());
  EXPECT_EQ(asked.request.compression, Compression::kBFloat16) << "for CheckRequest to refuse";
}

TEST_F(DevicePlacementTest, AGpuEntryGetsItsDeviceAndTheDefaultCompressionOfFloat32Allreduces) {
  Entry entry = MakeEntry("grad");
  ASSERT_TRUE(placement_->Place(entry, Gpu(1), std::nullopt).ok());
  EXPECT_EQ(entry.request.device, DeviceClass::kGpu);
  EXPECT_EQ(entry.request.compression, Compression::kFloat16);
  EXPECT_EQ(entry.device, 1);
  EXPECT_TRUE(entry.state->on_device);
  EXPECT_EQ(entry.ready, nullptr) << "inputs ready at submission";
  EXPECT_EQ(plane_->marked, 0);

  Entry asked = MakeEntry("grad2");
  ASSERT_TRUE(placement_->Place(asked, Gpu(1), Compression::kNone).ok());
  EXPECT_EQ(asked.request.compression, Compression::kNone) << "the caller's choice wins";

  Entry doubles = MakeEntry("d", CollectiveType::kAllreduce, DataType::kFloat64);
  ASSERT_TRUE(placement_->Place(doubles, Gpu(1), std::nullopt).ok());
  EXPECT_EQ(doubles.request.compression, Compression::kNone);
  Entry gathered = MakeEntry("g", CollectiveType::kAllgather);
  ASSERT_TRUE(placement_->Place(gathered, Gpu(1), std::nullopt).ok());
  EXPECT_EQ(gathered.request.compression, Compression::kNone);
}

TEST_F(DevicePlacementTest, ARankRunsItsGpuOperationsOnOneDevice) {
  Entry first = MakeEntry("a");
  ASSERT_TRUE(placement_->Place(first, Gpu(0), std::nullopt).ok());
  Entry other = MakeEntry("b");
  absl::Status s = placement_->Place(other, Gpu(1), std::nullopt);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'b' is on GPU 1, but this rank's GPU operations run on GPU 0"),
            std::string::npos)
      << s;
  Entry host = MakeEntry("c");
  EXPECT_TRUE(placement_->Place(host, Device{}, std::nullopt).ok()) << "the host is no device";
}

TEST_F(DevicePlacementTest, ADeviceThisProcessCannotUseIsRefusedBeforeTheOneDeviceRule) {
  Entry first = MakeEntry("a");
  ASSERT_TRUE(placement_->Place(first, Gpu(0), std::nullopt).ok());
  Entry entry = MakeEntry("b");
  absl::Status s = placement_->Place(entry, Gpu(5), std::nullopt);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "'b' is on GPU 5, but no CUDA device 5");
}

TEST_F(DevicePlacementTest, WithNoPlaneAGpuEntryFailsWithTheReason) {
  DevicePlacement none(absl::UnimplementedError("this libtroika was built without CUDA"),
                       Compression::kNone);
  EXPECT_EQ(none.plane(), nullptr);
  Entry entry = MakeEntry("grad");
  absl::Status s = none.Place(entry, Gpu(0), std::nullopt);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "'grad' is on GPU 0, but this libtroika was built without CUDA");
  Entry host = MakeEntry("host");
  EXPECT_TRUE(none.Place(host, Device{}, std::nullopt).ok());
}

TEST_F(DevicePlacementTest, TheDeviceWaitsForTheCallersEventOrItsStreamMarkedAtSubmission) {
  int event = 0;
  Device with_event = Gpu(0);
  with_event.ready_event = &event;
  with_event.ready_stream = &event;  // the event wins
  Entry a = MakeEntry("a");
  ASSERT_TRUE(placement_->Place(a, with_event, std::nullopt).ok());
  EXPECT_EQ(a.ready.get(), &event);
  EXPECT_EQ(plane_->marked, 0);

  int stream = 0;
  Device with_stream = Gpu(0);
  with_stream.ready_stream = &stream;
  Entry b = MakeEntry("b");
  ASSERT_TRUE(placement_->Place(b, with_stream, std::nullopt).ok());
  EXPECT_EQ(b.ready.get(), &plane_->event) << "marked now";
  EXPECT_EQ(b.ready_stream, nullptr);
  EXPECT_EQ(plane_->marked, 1);
}

TEST_F(DevicePlacementTest, AStreamOfAnotherCurrentDeviceIsMarkedWhenIssued) {
  int stream = 0;
  Device device = Gpu(1);
  device.ready_stream = &stream;
  Entry entry = MakeEntry("a");
  ASSERT_TRUE(placement_->Place(entry, device, std::nullopt).ok());
  EXPECT_EQ(entry.ready, nullptr);
  EXPECT_EQ(entry.ready_stream, &stream);
}

TEST_F(DevicePlacementTest, AFailedMarkNamesTheTensor) {
  Device device = Gpu(0);
  device.ready_stream = &plane_->broken_stream;
  Entry entry = MakeEntry("grad");
  absl::Status s = placement_->Place(entry, device, std::nullopt);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "'grad': cudaEventRecord failed");
}

}  // namespace
}  // namespace troika::internal
