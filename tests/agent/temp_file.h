#pragma once
// TempFile: a file under /tmp holding given text, removed when the test ends. Header-only.

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace troika::agent {

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char path[] = "/tmp/troika-test-file-XXXXXX";
    const int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    close(fd);
    path_ = path;
    std::ofstream(path_) << text;
  }
  ~TempFile() { unlink(path_.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace troika::agent
