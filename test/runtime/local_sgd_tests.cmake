# LocalSGD tests (test/runtime/local_sgd_multirank_test.cpp). Included by test/runtime/CMakeLists.txt.
foreach(name IN ITEMS EveryStepAveragedEqualsDdp ReplicasAgreeAfterEachAverageAndTheLossFalls
                     ShardedStrategiesAndZeroStepsAreRefused)
  accelerate_multirank_test(multirank.LocalSGD.${name} NPROC 2 FILTER LocalSGD.${name})
endforeach()
accelerate_multirank_test(multirank.LocalSGD.EveryStepAveragedEqualsDdp.3proc NPROC 3
                          FILTER LocalSGD.EveryStepAveragedEqualsDdp)
