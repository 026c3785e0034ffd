# FSDP tests (test/runtime/fsdp_multirank_test.cpp). Included by test/runtime/CMakeLists.txt.

foreach(nproc IN ITEMS 2 3)
  foreach(name IN ITEMS MatchesDdpAfterTenAdamWSteps MatchesDdpWithAccumulationNoSyncAndClipping)
    accelerate_multirank_test(multirank.Fsdp.${name}.${nproc}proc NPROC ${nproc} FILTER Fsdp.${name})
  endforeach()
endforeach()
foreach(name IN ITEMS ActivationCheckpointingRecomputesTheSameGradients OffloadParamsIsANoOpOnTheCpu Float32NormWiseWithinOneMillionth TheFp16ScalerSkipsTheStepsDdpSkips Bf16MixedPrecisionMatchesDdp
                     UnitParametersHoldNoDataOutsideTheirForward AUnitOutsideEveryPreparedModelIsRefused
                     AutoWrapPoliciesChooseTheUnits
                     AUnitsBackwardHoldsTwoUnitSizedBuffersAtMost)
  accelerate_multirank_test(multirank.Fsdp.${name} NPROC 2 FILTER Fsdp.${name})
endforeach()
# Hybrid sharding: 2 machines x 2 processes on loopback (one accel launch per machine); on one machine, refused.
accelerate_multirank_test(multirank.Fsdp.HybridShardingMatchesDdpOnTwoMachines NPROC 4 MACHINES 2
                          FILTER Fsdp.HybridShardingMatchesDdpOnTwoMachines)
accelerate_multirank_test(multirank.Fsdp.HybridShardingOnOneMachineIsRefused NPROC 2
                          FILTER Fsdp.HybridShardingOnOneMachineIsRefused)
# The offload code paths on the CPU (a test hook: there they are no-ops), on shared memory and over Gloo.
accelerate_multirank_test(multirank.Fsdp.OffloadPathsTrainAsWithoutThem NPROC 2
                          FILTER Fsdp.OffloadPathsTrainAsWithoutThem ENVIRONMENT ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1)
accelerate_multirank_test(multirank.Fsdp.OffloadPathsTrainAsWithoutThem.gloo NPROC 2
                          FILTER Fsdp.OffloadPathsTrainAsWithoutThem
                          ENVIRONMENT ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1 ACCELERATE_SHM_ALLREDUCE=0)
# fsdp_offload_params on one process: each unit one share, in CPU memory (the offload paths, on the CPU).
accelerate_multirank_test(multirank.FsdpCheckpoints.OffloadOnOneProcessShardsIntoOneShare NPROC 1
                          FILTER FsdpCheckpoints.OffloadOnOneProcessShardsIntoOneShare
                          ENVIRONMENT ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1
                                      ACCEL_FSDP_CHECKPOINTS=${CMAKE_CURRENT_BINARY_DIR}/fsdp_offload_checkpoints)
accelerate_multirank_test(multirank.FsdpCheckpoints.ACheckpointedUnitKeepsAnUndefinedInput NPROC 1
                          FILTER FsdpCheckpoints.ACheckpointedUnitKeepsAnUndefinedInput
                          ENVIRONMENT ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1)
# Over c10d's Gloo instead of shared memory; prefetch only overlaps there.
accelerate_multirank_test(multirank.Fsdp.MatchesDdpWithAccumulationNoSyncAndClipping.gloo NPROC 2
                          FILTER Fsdp.MatchesDdpWithAccumulationNoSyncAndClipping ENVIRONMENT ACCELERATE_SHM_ALLREDUCE=0)
accelerate_multirank_test(multirank.Fsdp.PrefetchGathersTheSameParameters.gloo NPROC 2
                          FILTER Fsdp.PrefetchGathersTheSameParameters ENVIRONMENT ACCELERATE_SHM_ALLREDUCE=0)

# Checkpoints: saved under DDP and FSDP (sharded and full state dicts, and sharded with offload's code path) on 2
# processes and resumed there, then resumed on 1 and 3.
set(fsdp_checkpoints ACCEL_FSDP_CHECKPOINTS=${CMAKE_CURRENT_BINARY_DIR}/fsdp_checkpoints
                     ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1)
accelerate_multirank_test(multirank.FsdpCheckpoints.SavedOnTwoProcesses NPROC 2
                          FILTER FsdpCheckpoints.SavedOnTwoProcesses ENVIRONMENT ${fsdp_checkpoints})
accelerate_multirank_test(multirank.FsdpCheckpoints.LoadedOnOneProcess NPROC 1
                          FILTER FsdpCheckpoints.LoadedOnOneProcess ENVIRONMENT ${fsdp_checkpoints})
accelerate_multirank_test(multirank.FsdpCheckpoints.LoadedOnThreeProcesses NPROC 3
                          FILTER FsdpCheckpoints.LoadedOnThreeProcesses ENVIRONMENT ${fsdp_checkpoints})
set_tests_properties(multirank.FsdpCheckpoints.SavedOnTwoProcesses PROPERTIES FIXTURES_SETUP fsdp_checkpoints)
set_tests_properties(multirank.FsdpCheckpoints.LoadedOnOneProcess multirank.FsdpCheckpoints.LoadedOnThreeProcesses
                     PROPERTIES FIXTURES_REQUIRED fsdp_checkpoints)

accelerate_multirank_test(multirank.FsdpCheckpoints.HybridShardsAreWrittenOnce NPROC 4 MACHINES 2
                          FILTER FsdpCheckpoints.HybridShardsAreWrittenOnce
                          ENVIRONMENT ACCEL_FSDP_CHECKPOINTS=${CMAKE_CURRENT_BINARY_DIR}/fsdp_hybrid_checkpoints)

# Debug mode: every collective (the gathers and reduce-scatters included) checked across processes, and the
# replica check told that parameters and optimizer state are sharded.
accelerate_multirank_test(multirank.Fsdp.MatchesDdpWithAccumulationNoSyncAndClipping.debug NPROC 2
                          FILTER Fsdp.MatchesDdpWithAccumulationNoSyncAndClipping ENVIRONMENT ACCELERATE_DEBUG_MODE=1)
accelerate_multirank_test(multirank.Fsdp.DebugModeNamesTheProcessThatSkippedAUnit NPROC 2
                          FILTER Fsdp.DebugModeNamesTheProcessThatSkippedAUnit ENVIRONMENT ACCELERATE_DEBUG_MODE=1)
