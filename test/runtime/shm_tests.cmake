# Shared-memory collective tests (test/runtime/shm_multirank_test.cpp). Included by test/runtime/CMakeLists.txt.
foreach(nproc IN ITEMS 2 3)
  foreach(name IN ITEMS SumMinMaxAreExactForEveryDtypeSizeAndLayout
                       AverageOfDifferentlySplitTensorsIsTheMeanOnEveryProcess
                       ReduceScatterIsTheAverageBitForBitAndAllGatherTheConcatenation
                       TheC10dPathAgreesWithSharedMemory)
    accelerate_multirank_test(multirank.ShmAllreduce.${name}.${nproc}ranks NPROC ${nproc}
                              FILTER ShmAllreduce.${name})
  endforeach()
endforeach()
foreach(name IN ITEMS EveryProcessGetsTheSameBitsAsGlooWouldAgreeOn MismatchedSizesAreReportedOnEveryProcess
                     AMismatchedAverageIsReportedOnEveryProcess AProcessThatExitedIsNamedInsteadOfWaitedFor
                     EveryProcessFallsBackToGlooWhenOneTurnsItOff
                     AnUnknownSettingIsRefusedByName InDebugModeTheHelpersGoThroughCheckedC10d
                     AMismatchedReduceScatterIsReportedOnEveryProcess
                     AnAllGatherMeetingAReduceScatterIsReportedOnEveryProcess)
  accelerate_multirank_test(multirank.ShmAllreduce.${name} NPROC 2 FILTER ShmAllreduce.${name} TIMEOUT 60)
endforeach()
