# FSDP tests (test/runtime/fsdp_multirank_test.cpp). Included by test/runtime/CMakeLists.txt.

foreach(nproc IN ITEMS 2 3)
  foreach(name IN ITEMS MatchesDdpAfterTenAdamWSteps MatchesDdpWithAccumulationNoSyncAndClipping)
    accelerate_multirank_test(multirank.Fsdp.${name}.${nproc}proc NPROC ${nproc} FILTER Fsdp.${name})
  endforeach()
endforeach()
foreach(name IN ITEMS Float32NormWiseWithinOneMillionth TheFp16ScalerSkipsTheStepsDdpSkips
                     UnitParametersHoldNoDataOutsideTheirForward AUnitOutsideEveryPreparedModelIsRefused
                     AnOptimizerWithoutAFusedStepIsRefusedByName)
  accelerate_multirank_test(multirank.Fsdp.${name} NPROC 2 FILTER Fsdp.${name})
endforeach()
# Over c10d's Gloo instead of shared memory.
accelerate_multirank_test(multirank.Fsdp.MatchesDdpWithAccumulationNoSyncAndClipping.gloo NPROC 2
                          FILTER Fsdp.MatchesDdpWithAccumulationNoSyncAndClipping ENVIRONMENT ACCELERATE_SHM_ALLREDUCE=0)
