#pragma once
// RETURN_IF_ERROR / ASSIGN_OR_RETURN: Debian's Abseil 20220623 ships neither.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TROIKA_STATUS_CONCAT_INNER(a, b) a##b
#define TROIKA_STATUS_CONCAT(a, b) TROIKA_STATUS_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status troika_status_ = (expr);          \
    if (!troika_status_.ok()) return troika_status_; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  TROIKA_ASSIGN_OR_RETURN_IMPL(TROIKA_STATUS_CONCAT(troika_statusor_, __LINE__), lhs, expr)

#define TROIKA_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr)  \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
