# Optimizers without a fused kernel under the sharded strategies (test/runtime/optimizer_multirank_test.cpp).
# Included by test/runtime/CMakeLists.txt.

foreach(name IN ITEMS EachOptimizerMatchesDdpUnderEachShardedStrategy LbfgsAndACoupledOptimizerAreRefusedByName)
  accelerate_multirank_test(multirank.ShardedOptimizers.${name} NPROC 2 FILTER ShardedOptimizers.${name})
endforeach()
# The same on the offload code paths (test hooks: on the CPU they are no-ops): FSDP's fsdp_offload_params, and
# ZeRO-Offload's host shares for the -offload strategies (offload_optimizer_device cpu).
accelerate_multirank_test(multirank.ShardedOptimizers.EachOptimizerMatchesDdpUnderEachShardedStrategy.offload
                          NPROC 2 FILTER ShardedOptimizers.EachOptimizerMatchesDdpUnderEachShardedStrategy
                          ENVIRONMENT ACCELERATE_FSDP_OFFLOAD_PATH_ON_CPU=1 FSDP_OFFLOAD_PARAMS=true
                                      ACCELERATE_ZERO_OFFLOAD_PATH_ON_CPU=1)

# Checkpoints saved in shares under ZeRO-2 on 2 processes, loaded under each strategy on 2 and on 1.
set(optimizer_checkpoints ACCEL_OPTIMIZER_CHECKPOINTS=${CMAKE_CURRENT_BINARY_DIR}/optimizer_checkpoints)
accelerate_multirank_test(multirank.ShardedOptimizerCheckpoints.SavedInSharesOnTwoProcesses NPROC 2
                          FILTER ShardedOptimizerCheckpoints.SavedInSharesOnTwoProcesses
                          ENVIRONMENT ${optimizer_checkpoints})
accelerate_multirank_test(multirank.ShardedOptimizerCheckpoints.LoadedOnOneProcess NPROC 1
                          FILTER ShardedOptimizerCheckpoints.LoadedOnOneProcess ENVIRONMENT ${optimizer_checkpoints})
set_tests_properties(multirank.ShardedOptimizerCheckpoints.SavedInSharesOnTwoProcesses PROPERTIES
                     FIXTURES_SETUP optimizer_checkpoints)
set_tests_properties(multirank.ShardedOptimizerCheckpoints.LoadedOnOneProcess PROPERTIES
                     FIXTURES_REQUIRED optimizer_checkpoints)
