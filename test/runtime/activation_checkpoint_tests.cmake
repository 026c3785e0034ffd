# Activation checkpointing outside fsdp: by hand (accelerate::checkpoint) and with the activation_checkpointing
# setting (test/runtime/activation_checkpoint_multirank_test.cpp).
# Included by test/runtime/CMakeLists.txt.

foreach(name IN ITEMS GradientsEqualThePlainRunOnOneProcess TheBodysOperationsAreNotInTheGraph
                     UnitsRecomputeOnOneProcessWithTheSetting)
  accelerate_multirank_test(multirank.ActivationCheckpoint.${name} NPROC 1 FILTER ActivationCheckpoint.${name})
endforeach()
foreach(name IN ITEMS DdpAndZero2TrainAsWithoutIt UnitsRecomputeUnderDdpAndZero2WithTheSetting)
  accelerate_multirank_test(multirank.ActivationCheckpoint.${name} NPROC 2 FILTER ActivationCheckpoint.${name})
endforeach()
