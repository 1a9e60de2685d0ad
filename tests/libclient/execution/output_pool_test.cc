#include "libclient/execution/output_pool.h"

#include "gtest/gtest.h"

namespace troika::internal {
namespace {

TEST(OutputPoolTest, ReleasedBufferIsReusedForASimilarSize) {
  auto pool = OutputPool::Create(1 << 20);
  uint8_t* first;
  {
    auto a = pool->Acquire(1000);
    first = a.get();
  }
  EXPECT_EQ(pool->idle_bytes(), 1000u);
  auto b = pool->Acquire(600);  // fits, wastes less than half
  EXPECT_EQ(b.get(), first);
  EXPECT_EQ(pool->idle_bytes(), 0u);
}

TEST(OutputPoolTest, MuchLargerIdleBufferIsNotHandedOut) {
  auto pool = OutputPool::Create(1 << 20);
  { auto big = pool->Acquire(10000); }
  auto small = pool->Acquire(100);
  EXPECT_EQ(pool->idle_bytes(), 10000u);
}

TEST(OutputPoolTest, KeepsNoMoreThanTheIdleCap) {
  auto pool = OutputPool::Create(1500);
  {
    auto a = pool->Acquire(1000);
    auto b = pool->Acquire(1000);
  }
  EXPECT_EQ(pool->idle_bytes(), 1000u);
}

TEST(OutputPoolTest, BufferMayOutliveThePool) {
  auto pool = OutputPool::Create(1 << 20);
  std::shared_ptr<uint8_t> held = pool->Acquire(64);
  pool.reset();
  held.get()[63] = 1;  // still valid; freed when released (ASan would object otherwise)
  held.reset();
}

}  // namespace
}  // namespace troika::internal
