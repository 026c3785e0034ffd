# `accel test`'s program (test_program.cpp): the checks it runs on the configured processes. It links the
# runtime, so the top-level CMakeLists.txt includes this file after the runtime's folder (a launcher-only build
# has `accel test` say the program is missing and how to build it).
add_executable(accel-test-program ${CMAKE_CURRENT_LIST_DIR}/test_program.cpp)
target_link_libraries(accel-test-program PRIVATE accelerate_runtime)
target_precompile_headers(accel-test-program REUSE_FROM accelerate_torch_pch)
set_target_properties(accel-test-program PROPERTIES BUILD_RPATH "${TORCH_INSTALL_PREFIX}/lib"
                      INSTALL_RPATH "${ACCEL_INSTALL_RPATH}")
install(TARGETS accel-test-program RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
