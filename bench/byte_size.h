#pragma once
// Byte counts on the command line and in tables: "4", "16KiB", "64M", "256MiB" (K, M, G and
// KiB, MiB, GiB all mean powers of 1024). Pure functions.

#include <cstddef>
#include <optional>
#include <string>

namespace troika::bench {

// nullopt if `text` is not a non-negative count with an optional suffix.
std::optional<size_t> ParseByteSize(const std::string& text);
// The shortest exact form: 4 -> "4", 16384 -> "16K", 67108864 -> "64M", 1000 -> "1000".
std::string FormatByteSize(size_t bytes);

}  // namespace troika::bench
