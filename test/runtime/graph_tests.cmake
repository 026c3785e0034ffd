# Graphed-step tests (test/runtime/graph_multirank_test.cpp). Included by test/runtime/CMakeLists.txt.
accelerate_multirank_test(multirank.GraphedStep.SeveralProcessesAreRefusedOnEveryProcess NPROC 2
                          FILTER GraphedStep.SeveralProcessesAreRefusedOnEveryProcess TIMEOUT 60)
