#include "bench/file_store.h"

#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace troika::bench {
namespace {

std::string FreshDirectory(const std::string& name) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/file_store_test_", getpid(), "_", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(FileStoreTest, ReadsBackWhatAnotherStoreOnTheDirectoryWrote) {
  const std::string dir = FreshDirectory("read_back");
  FileStore writer(dir), reader(dir);
  ASSERT_TRUE(writer.Set("bench/raw/rank/0", std::string("a\0b", 3)).ok());
  absl::StatusOr<std::string> value = reader.Get("bench/raw/rank/0", absl::Seconds(1));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::string("a\0b", 3));
  ASSERT_TRUE(writer.Set("bench/raw/rank/0", "replaced").ok());
  EXPECT_EQ(*reader.Get("bench/raw/rank/0", absl::Seconds(1)), "replaced");
  EXPECT_TRUE(reader.RemoveAll().ok());
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(FileStoreTest, KeysThatDifferOnlyInSlashesStayApart) {
  const std::string dir = FreshDirectory("slashes");
  FileStore store(dir);
  ASSERT_TRUE(store.Set("a/b", "slash").ok());
  ASSERT_TRUE(store.Set("a%2Fb", "percent").ok());
  EXPECT_EQ(*store.Get("a/b", absl::Seconds(1)), "slash");
  EXPECT_EQ(*store.Get("a%2Fb", absl::Seconds(1)), "percent");
  EXPECT_TRUE(store.RemoveAll().ok());
}

TEST(FileStoreTest, WaitReturnsOnceEveryKeyIsSet) {
  const std::string dir = FreshDirectory("wait");
  FileStore store(dir);
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(20));
    ASSERT_TRUE(store.Set("k1", "1").ok());
    ASSERT_TRUE(store.Set("k2", "2").ok());
  });
  EXPECT_TRUE(store.Wait({"k1", "k2"}, absl::Seconds(30)).ok());
  setter.join();
  EXPECT_TRUE(store.RemoveAll().ok());
}

TEST(FileStoreTest, GetOfAMissingKeyFailsNamingItAfterTheTimeout) {
  const std::string dir = FreshDirectory("missing");
  FileStore store(dir);
  absl::StatusOr<std::string> value = store.Get("never/set", absl::Milliseconds(20));
  ASSERT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(value.status().message().find("never/set"), std::string::npos);
  EXPECT_TRUE(store.RemoveAll().ok());
}

}  // namespace
}  // namespace troika::bench
