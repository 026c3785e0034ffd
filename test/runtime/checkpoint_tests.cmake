# Multi-rank tests of checkpoints and debug mode (test/runtime/checkpoint_multirank_test.cpp), each a ctest
# test of n ranks started by run_ranks.py. Included by test/runtime/CMakeLists.txt. The whole-process tests
# (SIGKILL and resume, a full disk, other world sizes, Python reading our files) live in test/checkpoint.

foreach(name IN ITEMS SaveOnTheMainProcessOnlyFailsWithAnExplanation DifferentCallsOnDifferentProcessesAreRefused
                     AFailureOnOneProcessFailsTheSaveEverywhereAndKeepsThePreviousCheckpoint
                     EveryProcessGetsItsOwnRandomStateBack TotalLimitKeepsTheNewestTwoOfFiveSaves
                     EachProcessOwnFileIsRecordedWithItsWriter)
  accelerate_multirank_test(multirank.Checkpoint.${name} NPROC 2 FILTER CheckpointMultirank.${name} TIMEOUT 60)
endforeach()
accelerate_multirank_test(multirank.DebugMode.AProcessThatSkipsACollectiveIsNamedByEveryOther NPROC 3
                          FILTER DebugMode.AProcessThatSkipsACollectiveIsNamedByEveryOther TIMEOUT 60)
accelerate_multirank_test(multirank.DebugMode.AShapeMismatchIsReportedBeforeAnyDataMoves NPROC 2
                          FILTER DebugMode.AShapeMismatchIsReportedBeforeAnyDataMoves TIMEOUT 60)
accelerate_multirank_test(multirank.DebugMode.TheChecksumNamesThePerturbedProcess NPROC 3
                          FILTER DebugMode.TheChecksumNamesThePerturbedProcess TIMEOUT 60)
accelerate_multirank_test(multirank.DebugMode.TheChecksumNamesThePerturbedProcess.2ranks NPROC 2
                          FILTER DebugMode.TheChecksumNamesThePerturbedProcess TIMEOUT 60)
accelerate_multirank_test(multirank.DebugMode.TheChecksumNamesAParamGroupWhoseLearningRateDiffers NPROC 2
                          FILTER DebugMode.TheChecksumNamesAParamGroupWhoseLearningRateDiffers TIMEOUT 60)
accelerate_multirank_test(multirank.DebugMode.BatchNormStatisticsOfEachProcessAreNotADivergence NPROC 2
                          FILTER DebugMode.BatchNormStatisticsOfEachProcessAreNotADivergence TIMEOUT 60)
