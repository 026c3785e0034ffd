# Multi-rank tests of the data loader and the collectives (test/runtime/data_multirank_test.cpp), each a
# ctest test of n ranks started by run_ranks.py. Included by test/runtime/CMakeLists.txt.

accelerate_multirank_test(multirank.DataLoader.GatherForMetricsReturnsEverySampleOnce NPROC 2
                          FILTER DataLoaderMultirank.GatherForMetricsReturnsEverySampleOnce TIMEOUT 60)
accelerate_multirank_test(multirank.DataLoader.GatherForMetricsReturnsEverySampleOnce.3ranks NPROC 3
                          FILTER DataLoaderMultirank.GatherForMetricsReturnsEverySampleOnce TIMEOUT 60)
accelerate_multirank_test(multirank.DataLoader.UnevenBatchesSeeEverySampleOnceAndNobodyHangs NPROC 2
                          FILTER DataLoaderMultirank.UnevenBatchesSeeEverySampleOnceAndNobodyHangs TIMEOUT 60)
accelerate_multirank_test(multirank.DataLoader.UnevenBatchesTrainWithoutHanging NPROC 2
                          FILTER DataLoaderMultirank.UnevenBatchesTrainWithoutHanging TIMEOUT 60)
accelerate_multirank_test(multirank.DataLoader.ProcessesDrawTheSameOrderEachEpoch NPROC 3
                          FILTER DataLoaderMultirank.ProcessesDrawTheSameOrderEachEpoch TIMEOUT 60)
# Worker threads against reading on the calling thread, one Accelerator configuration each.
foreach(name IN ITEMS EveryProcessBatchesAndOrder SplitBatches UnevenBatchesAndNobodyHangs)
  accelerate_multirank_test(multirank.DataLoader.WorkerThreadsKeep${name} NPROC 2
                            FILTER DataLoaderMultirank.WorkerThreadsKeep${name} TIMEOUT 60)
endforeach()
# dispatch_batches: the main process alone reads, the others receive their batches.
foreach(name IN ITEMS GivesEveryProcessItsOwnBatches KeepsUnevenBatchesAndNobodyHangs ReportsAFailedReadOnEveryProcess)
  accelerate_multirank_test(multirank.DataLoader.DispatchBatches${name} NPROC 2
                            FILTER DataLoaderMultirank.DispatchBatches${name} TIMEOUT 90)
endforeach()
# The collectives' tests are quick: one launch of 3 ranks runs them all.
accelerate_multirank_test(multirank.Collectives NPROC 3 FILTER CollectivesMultirank.* TIMEOUT 90)
