"""The one line a test prints for each measured floating-point spread, read by scripts/numerics-matrix.sh
(the same format as test/support/numerics.h's report_spread)."""


def report_spread(label, value, limit):
    print(f"numerics: {label}: relative difference {value:.3g} (limit {limit:.3g})", flush=True)
