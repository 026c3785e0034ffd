// Floating-point comparisons between runs in the tests (GoogleTest assertions over test/support/spread.h).
// docs/development.md ("Exact and tolerant comparisons") lists every comparison and why it is exact or how
// wide its tolerance is.
#pragma once

#include "spread.h"

#include <gtest/gtest.h>

#include <string>

namespace accelerate_test {

/// Whether `actual` is within `limit` of `expected` (relative_difference), reporting the spread either way.
/// For two paths meant to compute the same result, where bit-equality would hold only on the CPU the test
/// was written on.
template <typename T>
::testing::AssertionResult within(const T& actual, const T& expected, double limit,
                                  const std::string& label) {
  const double difference = relative_difference(actual, expected);
  report_spread(label, difference, limit);
  if (difference <= limit) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << label << ": relative difference " << difference << " exceeds " << limit;
}

} // namespace accelerate_test
