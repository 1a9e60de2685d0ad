#include "bench/byte_size.h"

#include <cctype>
#include <cstdint>

#include "absl/strings/numbers.h"

namespace troika::bench {

std::optional<size_t> ParseByteSize(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  uint64_t count = 0;
  if (digits == 0 || !absl::SimpleAtoi(text.substr(0, digits), &count)) return std::nullopt;
  std::string suffix = text.substr(digits);
  if (suffix.size() == 3 && suffix.substr(1) == "iB") suffix.resize(1);
  int shift = 0;
  if (suffix == "K") {
    shift = 10;
  } else if (suffix == "M") {
    shift = 20;
  } else if (suffix == "G") {
    shift = 30;
  } else if (!suffix.empty() && suffix != "B") {
    return std::nullopt;
  }
  if (count > (UINT64_MAX >> shift)) return std::nullopt;
  return static_cast<size_t>(count << shift);
}

std::string FormatByteSize(size_t bytes) {
  const char* units[] = {"", "K", "M", "G"};
  int unit = 0;
  while (unit < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + units[unit];
}

}  // namespace troika::bench
