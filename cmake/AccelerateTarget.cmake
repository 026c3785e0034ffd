# accelerate_target(): build a plain single-device training loop as a distributed binary.
#
#   accelerate_target(<target> SOURCES <file>... [NO_REWRITE <file>...])
#
# Creates the executable <target>. At build time each file in SOURCES (except those also in NO_REWRITE) is
# rewritten by accel-rewrite into the build directory, and the rewritten copy is compiled and linked with
# accelerate::runtime and Torch. A change to a source re-runs its rewrite; nothing else does.
# Configure with -DACCELERATE_REWRITE=OFF to compile the plain sources unchanged (for debugging).

option(ACCELERATE_REWRITE "Rewrite the sources of accelerate_target() targets with accel-rewrite" ON)

function(accelerate_target target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "SOURCES;NO_REWRITE")
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "accelerate_target(${target}): no SOURCES given; list the training loop's .cpp files")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "accelerate_target(${target}): unknown arguments '${ARG_UNPARSED_ARGUMENTS}'")
  endif()

  set(rewrite_tool "")
  if(ACCELERATE_REWRITE)
    if(TARGET accel-rewrite)
      set(rewrite_tool $<TARGET_FILE:accel-rewrite>)
    elseif(TARGET accelerate::accel-rewrite)
      set(rewrite_tool $<TARGET_FILE:accelerate::accel-rewrite>)
    else()
      message(FATAL_ERROR "accelerate_target(${target}): accel-rewrite is not available (this build or install "
                          "has no rewriter: it needs LLVM 19). Build with the rewriter, or configure with "
                          "-DACCELERATE_REWRITE=OFF to compile the sources unchanged.")
    endif()
  endif()

  separate_arguments(torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  set(sources "")
  set(source_dirs "")
  foreach(source IN LISTS ARG_SOURCES)
    get_filename_component(source_path "${source}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    get_filename_component(source_dir "${source_path}" DIRECTORY)
    list(APPEND source_dirs "${source_dir}")
    list(FIND ARG_NO_REWRITE "${source}" skip)
    if(NOT rewrite_tool OR NOT skip EQUAL -1)
      list(APPEND sources "${source_path}")
      continue()
    endif()
    file(RELATIVE_PATH relative "${CMAKE_CURRENT_SOURCE_DIR}" "${source_path}")
    string(REPLACE "../" "__/" relative "${relative}")
    set(rewritten "${CMAKE_CURRENT_BINARY_DIR}/${target}.accelerate/${relative}")
    set(includes "$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>")
    set(definitions "$<TARGET_PROPERTY:${target},COMPILE_DEFINITIONS>")
    add_custom_command(
      OUTPUT "${rewritten}"
      COMMAND "${rewrite_tool}" "${source_path}" -o "${rewritten}" --
              -std=c++${CMAKE_CXX_STANDARD} ${torch_flags}
              "$<$<BOOL:${includes}>:-I$<JOIN:${includes},;-I>>"
              "$<$<BOOL:${definitions}>:-D$<JOIN:${definitions},;-D>>"
      DEPENDS "${source_path}" "${rewrite_tool}"
      COMMENT "accel-rewrite ${relative}"
      COMMAND_EXPAND_LISTS
      VERBATIM)
    list(APPEND sources "${rewritten}")
  endforeach()

  add_executable(${target} ${sources})
  list(REMOVE_DUPLICATES source_dirs)
  # The rewritten copies live in the build tree; their quoted includes still resolve beside the originals.
  target_include_directories(${target} PRIVATE ${source_dirs} ${TORCH_INCLUDE_DIRS})
  target_link_libraries(${target} PRIVATE accelerate::runtime)
  if(TARGET accelerate_torch_pch)
    # In this project's own tree, share the runtime's precompiled <torch/torch.h>.
    target_precompile_headers(${target} REUSE_FROM accelerate_torch_pch)
  endif()
  if(TORCH_INSTALL_PREFIX)
    set_target_properties(${target} PROPERTIES BUILD_RPATH "${TORCH_INSTALL_PREFIX}/lib")
  endif()
endfunction()
