# Gradient communication hook tests (test/runtime/comm_hook_multirank_test.cpp). Included by
# test/runtime/CMakeLists.txt. The hooks' bytes are counted where they are handed to the process group; the
# `.gloo` entries send them over c10d's Gloo rather than the same-machine shared-memory transport.
foreach(name IN ITEMS Fp16HalvesTheBytesWithinItsPrecision Bf16HalvesTheBytesWithinItsPrecision)
  accelerate_multirank_test(multirank.CommHook.${name} NPROC 2 FILTER CommHook.${name})
  accelerate_multirank_test(multirank.CommHook.${name}.gloo NPROC 2 FILTER CommHook.${name}
                            ENVIRONMENT ACCELERATE_SHM_ALLREDUCE=0)
endforeach()
foreach(name IN ITEMS AnUnknownHookIsRefusedWithTheKnownNames AShardedStrategyRefusesAHook)
  accelerate_multirank_test(multirank.CommHook.${name} NPROC 2 FILTER CommHook.${name})
endforeach()
