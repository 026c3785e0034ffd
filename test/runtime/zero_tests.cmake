# ZeRO tests (test/runtime/zero_multirank_test.cpp). Included by test/runtime/CMakeLists.txt.

foreach(name IN ITEMS MatchesDdpWithoutAccumulationOrClipping Stage2ReduceScattersBucketsWhileBackwardRuns
                     TheFp16ScalerSkipsTheStepsDdpSkipsWhenOneShareOverflows
                     Stage2RefusesAParameterNoPreparedOptimizerSteps
                     UnevenBatchesAreRefusedAtPrepareDataLoader)
  accelerate_multirank_test(multirank.Zero.${name} NPROC 2 FILTER Zero.${name})
endforeach()
foreach(nproc IN ITEMS 2 3)
  foreach(name IN ITEMS NearDdpWithAccumulationClippingGroupsAndUnusedParametersAdamW
                       NearDdpWithAccumulationClippingGroupsAndUnusedParametersSgd)
    accelerate_multirank_test(multirank.Zero.${name}.${nproc}proc NPROC ${nproc} FILTER Zero.${name})
  endforeach()
endforeach()
accelerate_multirank_test(multirank.Zero.Float32ThreeProcessesWithinOneMillionth NPROC 3
                          FILTER Zero.Float32ThreeProcessesWithinOneMillionth)
# Across machines the collectives are c10d's (Gloo here): the same comparisons over that transport.
foreach(name IN ITEMS MatchesDdpWithoutAccumulationOrClipping
                     NearDdpWithAccumulationClippingGroupsAndUnusedParametersAdamW)
  accelerate_multirank_test(multirank.Zero.${name}.gloo NPROC 2 FILTER Zero.${name}
                            ENVIRONMENT ACCELERATE_SHM_ALLREDUCE=0)
endforeach()

# Debug mode: every collective checked across processes (the collectives then go through c10d) and the
# replicas' parameters compared, while ZeRO still matches DDP bit for bit.
accelerate_multirank_test(multirank.Zero.MatchesDdpWithoutAccumulationOrClipping.debug NPROC 2
                          FILTER Zero.MatchesDdpWithoutAccumulationOrClipping ENVIRONMENT ACCELERATE_DEBUG_MODE=1)

# Checkpoints: saved under each strategy on 2 processes (and resumed there), then resumed on 1 and 3.
set(zero_checkpoints ACCEL_ZERO_CHECKPOINTS=${CMAKE_CURRENT_BINARY_DIR}/zero_checkpoints)
accelerate_multirank_test(multirank.ZeroCheckpoints.SavedOnTwoProcessesUnderEachStrategy NPROC 2
                          FILTER ZeroCheckpoints.SavedOnTwoProcessesUnderEachStrategy ENVIRONMENT ${zero_checkpoints})
accelerate_multirank_test(multirank.ZeroCheckpoints.LoadedOnOneProcess NPROC 1
                          FILTER ZeroCheckpoints.LoadedOnOneProcess ENVIRONMENT ${zero_checkpoints})
accelerate_multirank_test(multirank.ZeroCheckpoints.LoadedOnThreeProcesses NPROC 3
                          FILTER ZeroCheckpoints.LoadedOnThreeProcesses ENVIRONMENT ${zero_checkpoints})
set_tests_properties(multirank.ZeroCheckpoints.SavedOnTwoProcessesUnderEachStrategy PROPERTIES
                     FIXTURES_SETUP zero_checkpoints)
set_tests_properties(multirank.ZeroCheckpoints.LoadedOnOneProcess multirank.ZeroCheckpoints.LoadedOnThreeProcesses
                     PROPERTIES FIXTURES_REQUIRED zero_checkpoints)
