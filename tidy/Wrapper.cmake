# tidy/Wrapper.cmake: accel-clang-tidy, clang-tidy-19 with the module loaded, in the build tree's bin/ and in
# <prefix>/bin; it finds the module relative to itself.
find_program(ACCEL_CLANG_TIDY NAMES clang-tidy-19 HINTS ${LLVM_TOOLS_BINARY_DIR})
if(NOT ACCEL_CLANG_TIDY)
  set(ACCEL_CLANG_TIDY clang-tidy-19)
endif()
include(GNUInstallDirs)
file(RELATIVE_PATH ACCEL_TIDY_MODULE_FROM_BIN ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}
  ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}/accelerate-tidy.so)
configure_file(accel-clang-tidy.in ${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/accel-clang-tidy @ONLY
  FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
file(RELATIVE_PATH ACCEL_TIDY_MODULE_FROM_BIN ${CMAKE_INSTALL_FULL_BINDIR}
  ${CMAKE_INSTALL_FULL_LIBDIR}/accelerate-tidy.so)
configure_file(accel-clang-tidy.in ${CMAKE_CURRENT_BINARY_DIR}/installed/accel-clang-tidy @ONLY)
install(PROGRAMS ${CMAKE_CURRENT_BINARY_DIR}/installed/accel-clang-tidy DESTINATION ${CMAKE_INSTALL_BINDIR}
  COMPONENT rewriter)
