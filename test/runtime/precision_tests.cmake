# Mixed-precision tests (test/runtime/precision_unit_test.cpp, precision_multirank_test.cpp). Included by
# test/runtime/CMakeLists.txt.

# The unit tests read the torch.amp.GradScaler oracle written by test/data/make_grad_scaler_sequence.py.
set_property(SOURCE precision_unit_test.cpp APPEND PROPERTY COMPILE_DEFINITIONS
             ACCEL_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/test/data")

accelerate_multirank_test(multirank.Precision.RanksSkipTogetherWhenOnlyOneOverflows NPROC 2
                          FILTER PrecisionMultirank.RanksSkipTogetherWhenOnlyOneOverflows TIMEOUT 60)
