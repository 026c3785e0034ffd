# accelerate_target(): build a plain single-device training loop as a distributed binary.
#
#   accelerate_target(<target> SOURCES <file>... [PASSES <pass>...] [DISABLE <pass>...] [NO_REWRITE <file>...]
#                     [LOG_WITH <tracker>...] [RESUME])
#
# Creates the executable <target>. At build time each file in SOURCES (except those also in NO_REWRITE) is
# rewritten by accel-rewrite into <build dir>/<target>.accelerate/, and the rewritten copy is compiled with the
# target's own flags and linked with accelerate::runtime and Torch. PASSES runs only the named passes, DISABLE
# skips passes (`accel-rewrite --list-passes` names them). LOG_WITH logs the training loop to these experiment
# trackers (`tensorboard`, `jsonl`, `csv`, `all` or a registered name; `accel-rewrite --log-with`): the
# accelerator gets them in its options, the loop starts and finishes them, and its printed loss is logged
# (docs/tracking.md); they write under ./runs/<target>, or $ACCEL_PROJECT_DIR/<target>. Where the training loop
# saves a model, the rewrite saves a checkpoint (accelerator.save_state("checkpoint")) and loads it back before
# the loop when the launcher restarts the job; RESUME (`accel-rewrite --resume`) loads it on any start that
# finds one.
#
# The rewrite of a file re-runs when the file, a header it includes (Ninja and Makefile generators, through the
# depfile accel-rewrite writes) or accel-rewrite itself changes, and at no other time. It parses the file with the
# target's include directories, compile definitions, and the -D/-U/-I/-std options of its compile options and of
# CMAKE_CXX_FLAGS. The rewritten copy carries #line directives, so compiler errors name the original file and line.
# Configure with -DACCELERATE_REWRITE=OFF to compile the plain sources unchanged (for debugging).

option(ACCELERATE_REWRITE "Rewrite the sources of accelerate_target() targets with accel-rewrite" ON)

# The directory of libtorch's libraries, for the targets' build RPATH (set where Torch was found).
if(TORCH_INSTALL_PREFIX)
  set_property(GLOBAL PROPERTY ACCELERATE_TORCH_LIBRARY_DIR "${TORCH_INSTALL_PREFIX}/lib")
endif()

function(accelerate_target target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "RESUME" "" "SOURCES;NO_REWRITE;PASSES;DISABLE;LOG_WITH")
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "accelerate_target(${target}): no SOURCES given; list the training loop's .cpp files")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "accelerate_target(${target}): unknown arguments '${ARG_UNPARSED_ARGUMENTS}'; the "
                        "keywords are SOURCES, PASSES, DISABLE, NO_REWRITE, LOG_WITH and RESUME")
  endif()
  if(NOT TARGET accelerate::runtime)
    message(FATAL_ERROR "accelerate_target(${target}): accelerate::runtime is not defined. Call "
                        "find_package(AccelerateCpp) (or add_subdirectory() of accelerate-cpp) first.")
  endif()

  set(rewrite_tool "")
  if(ACCELERATE_REWRITE)
    if(TARGET accel-rewrite)
      set(rewrite_tool $<TARGET_FILE:accel-rewrite>)
      set(rewrite_depends accel-rewrite)
    elseif(TARGET accelerate::accel-rewrite)
      set(rewrite_tool $<TARGET_FILE:accelerate::accel-rewrite>)
      set(rewrite_depends $<TARGET_FILE:accelerate::accel-rewrite>)
    else()
      message(FATAL_ERROR "accelerate_target(${target}): accel-rewrite is not available (this build or install "
                          "of accelerate-cpp has no rewriter: it needs LLVM/Clang 19). Build accelerate-cpp with "
                          "the rewriter (-DACCEL_BUILD_REWRITER=ON), or configure with -DACCELERATE_REWRITE=OFF "
                          "to compile the sources unchanged.")
    endif()
  endif()

  set(no_rewrite "")
  foreach(source IN LISTS ARG_NO_REWRITE)
    get_filename_component(source_path "${source}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND no_rewrite "${source_path}")
  endforeach()

  set(pass_flags "")
  if(ARG_PASSES)
    list(JOIN ARG_PASSES "," passes)
    list(APPEND pass_flags "--passes=${passes}")
  endif()
  if(ARG_DISABLE)
    list(JOIN ARG_DISABLE "," disabled)
    list(APPEND pass_flags "--disable=${disabled}")
  endif()
  if("LOG_WITH" IN_LIST ARG_KEYWORDS_MISSING_VALUES)
    message(FATAL_ERROR "accelerate_target(${target}): LOG_WITH needs tracker names, e.g. LOG_WITH tensorboard")
  endif()
  if(ARG_LOG_WITH)
    list(JOIN ARG_LOG_WITH "," trackers)
    list(APPEND pass_flags "--log-with=${trackers}" "--project-name=${target}")
  endif()
  if(ARG_RESUME)
    list(APPEND pass_flags "--resume")
  endif()

  # The rewriter parses with the target's own view of the code (transitive: Torch's and the runtime's too).
  set(includes "$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>")
  set(definitions "$<TARGET_PROPERTY:${target},COMPILE_DEFINITIONS>")
  set(parse_option "^-([DUI]|std=)")
  set(options "$<FILTER:$<TARGET_PROPERTY:${target},COMPILE_OPTIONS>,INCLUDE,${parse_option}>")
  set(standard "$<TARGET_PROPERTY:${target},CXX_STANDARD>")
  separate_arguments(cxx_flags UNIX_COMMAND "${CMAKE_CXX_FLAGS}")
  list(FILTER cxx_flags INCLUDE REGEX "${parse_option}")
  # A depfile lists the headers each rewrite read (CMake supports it for these generators since 3.20).
  set(use_depfile OFF)
  if(CMAKE_GENERATOR MATCHES "Ninja|Makefiles")
    set(use_depfile ON)
  endif()

  set(sources "")
  set(source_dirs "")
  foreach(source IN LISTS ARG_SOURCES)
    get_filename_component(source_path "${source}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    get_filename_component(source_dir "${source_path}" DIRECTORY)
    list(APPEND source_dirs "${source_dir}")
    list(FIND no_rewrite "${source_path}" skip)
    if(NOT rewrite_tool OR NOT skip EQUAL -1 OR NOT source_path MATCHES "\\.(cpp|cc|cxx|c\\+\\+|C)$")
      list(APPEND sources "${source_path}")
      continue()
    endif()
    file(RELATIVE_PATH relative "${CMAKE_CURRENT_SOURCE_DIR}" "${source_path}")
    string(REPLACE "../" "__/" relative "${relative}")
    set(rewritten "${CMAKE_CURRENT_BINARY_DIR}/${target}.accelerate/${relative}")
    set(depfile_args "")
    set(depfile_flags "")
    if(use_depfile)
      set(depfile_args DEPFILE "${rewritten}.d")
      set(depfile_flags "--depfile=${rewritten}.d")
    endif()
    set(make_directory "")
    if(NOT CMAKE_GENERATOR MATCHES "Ninja")
      # Ninja creates an output's directory; the other generators do not.
      get_filename_component(rewritten_dir "${rewritten}" DIRECTORY)
      set(make_directory COMMAND "${CMAKE_COMMAND}" -E make_directory "${rewritten_dir}")
    endif()
    add_custom_command(
      OUTPUT "${rewritten}"
      ${make_directory}
      COMMAND "${rewrite_tool}" "${source_path}" -o "${rewritten}" --line-directives ${depfile_flags}
              ${pass_flags} --
              "-std=c++$<IF:$<BOOL:${standard}>,${standard},17>"
              "$<$<BOOL:${includes}>:-I$<JOIN:${includes},;-I>>"
              "$<$<BOOL:${definitions}>:-D$<JOIN:${definitions},;-D>>"
              "${options}" ${cxx_flags}
      DEPENDS "${source_path}" ${rewrite_depends}
      ${depfile_args}
      COMMENT "accel-rewrite ${relative}"
      COMMAND_EXPAND_LISTS
      VERBATIM)
    list(APPEND sources "${rewritten}")
  endforeach()

  add_executable(${target} ${sources})
  list(REMOVE_DUPLICATES source_dirs)
  # The rewritten copies live in the build tree; their quoted includes still resolve beside the originals.
  target_include_directories(${target} PRIVATE ${source_dirs})
  target_link_libraries(${target} PRIVATE accelerate::runtime)
  if(TARGET accelerate_torch_pch)
    # In this project's own tree, share the runtime's precompiled <torch/torch.h>.
    target_precompile_headers(${target} REUSE_FROM accelerate_torch_pch)
  endif()
  get_property(torch_library_dir GLOBAL PROPERTY ACCELERATE_TORCH_LIBRARY_DIR)
  if(torch_library_dir)
    set_target_properties(${target} PROPERTIES BUILD_RPATH "${torch_library_dir}")
  endif()
endfunction()
