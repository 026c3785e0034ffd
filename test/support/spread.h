// Measured floating-point spreads: the tolerances the tests hold them to, the one line each prints for
// scripts/numerics-matrix.sh, and the intra-op thread count the matrix varies. No GoogleTest here: the
// benchmarks use it too (test/support/numerics.h adds the GoogleTest assertion).
#pragma once

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace accelerate_test {

/// Float64 parity between two code paths meant to compute the same result (offloaded against resident
/// buffers, recomputed against kept activations, a flat share against separate parameters, one sharding
/// against another): ‖Δθ‖/‖θ‖ at most this. The worst spread measured across the numerics matrix
/// (docs/development.md) is 1.7e-16 for these runs (MKL_CBWR=COMPATIBLE); 1e-13 is under 1000 times that and
/// far below what a wrong gradient, a missed step or a skipped clip gives (1e-5 or more: a copy scaled
/// by 1.0001).
constexpr double kFloat64PathParity = 1e-13;

/// The same for fp32 runs, norm-wise (DESIGN §5): one fp32 ulp is 1.2e-7 relative, and a few steps of
/// training carry a few of them.
constexpr double kFloat32PathParity = 1e-6;

/// The intra-op thread count parity tests run with: 1, unless ACCEL_TEST_INTRA_OP_THREADS names another
/// (scripts/numerics-matrix.sh runs the numerics groups with 2 as well). Every rank of a comparison, and both
/// sides of it, use the same count.
inline int intra_op_threads() {
  const char* value = std::getenv("ACCEL_TEST_INTRA_OP_THREADS");
  if (value == nullptr || *value == '\0') {
    return 1;
  }
  const int threads = std::atoi(value);
  if (threads < 1) {
    std::fprintf(stderr, "ACCEL_TEST_INTRA_OP_THREADS must be a whole number >= 1 (got '%s')\n", value);
    std::abort();
  }
  return threads;
}

/// Sets ATen's intra-op thread count to intra_op_threads().
inline void set_intra_op_threads() {
  at::set_num_threads(intra_op_threads());
}

/// ‖a − b‖ / ‖b‖ (0 when both are zero).
inline double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.norm().item<double>();
  const double difference = (a - b).norm().item<double>();
  return scale == 0 ? difference : difference / scale;
}

/// The largest |a_i − b_i| / |b_i| over a sequence (losses, norms), as a tensor comparison of the values.
inline double relative_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = a.size() == b.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double difference = std::abs(a[i] - b[i]);
    const double relative = b[i] == 0 ? difference : difference / std::abs(b[i]);
    if (std::isnan(relative)) {
      return relative; // std::max would drop it: a NaN loss must fail the comparison
    }
    worst = std::max(worst, relative);
  }
  return worst;
}

/// Prints a measured spread as the line scripts/numerics-matrix.sh reads:
///   numerics: <label>: relative difference <value> (limit <limit>)
inline void report_spread(const std::string& label, double value, double limit) {
  std::printf("numerics: %s: relative difference %.3g (limit %.3g)\n", label.c_str(), value, limit);
  std::fflush(stdout);
}

} // namespace accelerate_test
