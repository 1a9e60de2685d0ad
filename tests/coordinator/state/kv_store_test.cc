#include "coordinator/state/kv_store.h"

#include <future>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace troika::coordinator {
namespace {

using ::testing::HasSubstr;

TEST(KvStoreTest, GetOfSetKeyAnswersAtOnce) {
  Scheduler scheduler;
  KvStore kv(scheduler);
  kv.Set("k", "v");
  std::string got;
  kv.Get("k", absl::ZeroDuration(), [&](absl::StatusOr<std::string> v) { got = *v; });
  EXPECT_EQ(got, "v");
}

TEST(KvStoreTest, GetWithoutTimeoutOfMissingKeyIsNotFound) {
  Scheduler scheduler;
  KvStore kv(scheduler);
  absl::Status status;
  kv.Get("k", absl::ZeroDuration(), [&](absl::StatusOr<std::string> v) { status = v.status(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
}

TEST(KvStoreTest, WaitCompletesWhenLastKeyIsSet) {
  Scheduler scheduler;
  KvStore kv(scheduler);
  std::promise<absl::Status> done;
  kv.Wait({"a", "b"}, absl::Seconds(30), [&](absl::Status s) { done.set_value(s); });
  kv.Set("a", "1");
  auto future = done.get_future();
  EXPECT_EQ(future.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  kv.Set("b", "2");
  EXPECT_TRUE(future.get().ok());
}

TEST(KvStoreTest, GetWaitsForKey) {
  Scheduler scheduler;
  KvStore kv(scheduler);
  std::promise<absl::StatusOr<std::string>> done;
  kv.Get("k", absl::Seconds(30), [&](absl::StatusOr<std::string> v) { done.set_value(v); });
  kv.Set("k", "late");
  EXPECT_EQ(*done.get_future().get(), "late");
}

TEST(KvStoreTest, WaitTimesOutNamingMissingKeys) {
  Scheduler scheduler;
  KvStore kv(scheduler);
  kv.Set("a", "1");
  std::promise<absl::Status> done;
  kv.Wait({"a", "b"}, absl::Milliseconds(20), [&](absl::Status s) { done.set_value(s); });
  absl::Status s = done.get_future().get();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("'b'"));
  EXPECT_THAT(s.message(), ::testing::Not(HasSubstr("'a'")));
}

TEST(KvStoreTest, CloseCompletesEveryWaiterAndLaterWaitsForMissingKeys) {
  Scheduler scheduler;
  KvStore kv(scheduler);
  int failed = 0;
  kv.Wait({"x"}, absl::Seconds(30),
          [&](absl::Status s) { failed += s.code() == absl::StatusCode::kAborted; });
  kv.Get("y", absl::Seconds(30), [&](absl::StatusOr<std::string> v) {
    failed += v.status().code() == absl::StatusCode::kAborted;
  });
  kv.Set("set", "v");
  kv.Close(absl::AbortedError("job aborted"));
  EXPECT_EQ(failed, 2);
  // Later: a wait for a missing key fails at once (it would never be set), with the first
  // reason; keys already set are still served.
  kv.Close(absl::CancelledError("second"));
  kv.Wait({"z"}, absl::Seconds(30),
          [&](absl::Status s) { failed += s.code() == absl::StatusCode::kAborted; });
  EXPECT_EQ(failed, 3);
  bool served = false;
  kv.Get("set", absl::Seconds(30), [&](absl::StatusOr<std::string> v) { served = v.ok(); });
  EXPECT_TRUE(served);
}

}  // namespace
}  // namespace troika::coordinator
