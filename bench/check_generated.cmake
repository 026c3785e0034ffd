# ctest bench.generated_up_to_date: bench/generated/train_ref.cpp must equal the build's rewrite of train_ref.cpp.
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${GENERATED}" "${REWRITTEN}" RESULT_VARIABLE different)
if(different)
  message(FATAL_ERROR "${GENERATED} is not what accel-rewrite makes of bench/train_ref.cpp now (${REWRITTEN}).\n"
                      "Update it: cp ${REWRITTEN} ${GENERATED}")
endif()
message(STATUS "bench/generated/train_ref.cpp is up to date")
