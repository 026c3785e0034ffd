# accelerate_target(): build a plain single-device training loop as a distributed binary.
#
#   accelerate_target(<target> SOURCES <file>... [PASSES <pass>...] [DISABLE <pass>...] [NO_REWRITE <file>...]
#                     [LOG_WITH <tracker>...] [PROGRESS_BAR] [PROFILE] [RESUME] [FSDP])
#
# Creates the executable <target>. At build time the files in SOURCES (except those also in NO_REWRITE) are
# rewritten by accel-rewrite, in one run, into <build dir>/<target>.accelerate/, and the rewritten copies are
# compiled with the target's own flags and linked with accelerate::runtime and Torch. The headers under the
# target's source directory that the sources include are copied beside them (same relative paths) and rewritten
# where a pass changes them, once however many sources include them; the copies of the target's include
# directories under the source directory come first on its include path, and the originals are never touched.
# PASSES runs only the named passes, DISABLE skips passes (`accel-rewrite --list-passes` names them). LOG_WITH logs the training loop to these experiment
# trackers (`tensorboard`, `mlflow`, `jsonl`, `csv`, `all` or a registered name; `accel-rewrite --log-with`): the
# accelerator gets them in its options, the loop starts and finishes them, and its printed loss is logged
# (docs/tracking.md); they write under ./runs/<target>, or $ACCEL_PROJECT_DIR/<target>. PROGRESS_BAR
# (`accel-rewrite --progress-bar`) shows a progress bar over the training loop on the main process
# (accelerate::ProgressBar over its step count, or accelerate::progress_bar over its data loader). PROFILE
# (`accel-rewrite --profile`) runs the training loop under libtorch's profiler (accelerator.profile(), stepped
# after each optimizer step): each process writes a Chrome trace to $ACCEL_PROFILE_DIR/profile_<process>.json
# (default ./profile), on the schedule $ACCEL_PROFILE_SCHEDULE gives (docs/tracking.md, "Profiling").
# Where the training loop saves a model, the rewrite saves a checkpoint (accelerator.save_state("checkpoint"))
# and loads it back before the loop when the launcher restarts the job; RESUME (`accel-rewrite --resume`) loads
# it on any start that finds one. FSDP (`accel-rewrite --enable=fsdp-units`) runs the forward of every module class the sources and
# the headers under the source directory define inside accelerate::fsdp::unit, so that under the fsdp strategy
# (distributed_type: FSDP) the wrap policy (fsdp_auto_wrap_policy) chooses the units without the model's code
# naming them.
#
# The rewrite of a file re-runs when the file, a header it includes (Ninja and Makefile generators, through the
# depfile accel-rewrite writes) or accel-rewrite itself changes, and at no other time. The parse of each source's
# #include block is precompiled once and kept in ACCELERATE_PREAMBLE_CACHE (default <build dir>/accelerate-preambles;
# empty for none) for the rewrites that follow, while the flags and the headers it read stay the same. It parses the file with the
# target's include directories, compile definitions, and the -D/-U/-I/-std options of its compile options and of
# CMAKE_CXX_FLAGS. The rewritten copy carries #line directives, so compiler errors name the original file and line.
# compile_commands.json lists the original sources too (with the target's flags, through <target>_editor_sources,
# an object library that is never built), so editors and clang-tidy open train.cpp with its own flags.
# Configure with -DACCELERATE_REWRITE=OFF to compile the plain sources unchanged (for debugging).

option(ACCELERATE_REWRITE "Rewrite the sources of accelerate_target() targets with accel-rewrite" ON)
set(ACCELERATE_PREAMBLE_CACHE "${CMAKE_BINARY_DIR}/accelerate-preambles" CACHE PATH
    "Where accel-rewrite keeps the precompiled #include blocks of the sources it rewrites, between builds (empty: none)")

# The directory of libtorch's libraries, for the targets' build RPATH (set where Torch was found).
if(TORCH_INSTALL_PREFIX)
  set_property(GLOBAL PROPERTY ACCELERATE_TORCH_LIBRARY_DIR "${TORCH_INSTALL_PREFIX}/lib")
endif()

function(accelerate_target target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "RESUME;FSDP;PROGRESS_BAR;PROFILE" "" "SOURCES;NO_REWRITE;PASSES;DISABLE;LOG_WITH")
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "accelerate_target(${target}): no SOURCES given; list the training loop's .cpp files")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "accelerate_target(${target}): unknown arguments '${ARG_UNPARSED_ARGUMENTS}'; the "
                        "keywords are SOURCES, PASSES, DISABLE, NO_REWRITE, LOG_WITH, PROGRESS_BAR, PROFILE, RESUME and FSDP")
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
  if(ARG_PROGRESS_BAR)
    list(APPEND pass_flags "--progress-bar")
  endif()
  if(ARG_PROFILE)
    list(APPEND pass_flags "--profile")
  endif()
  if(ARG_RESUME)
    list(APPEND pass_flags "--resume")
  endif()
  if(ARG_FSDP)
    list(APPEND pass_flags "--enable=fsdp-units")
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

  set(out_dir "${CMAKE_CURRENT_BINARY_DIR}/${target}.accelerate")
  # The rewrite mirrors a root that holds every source (the source directory, or above it for sources
  # outside it) into the output directory, and rewrites the headers under the source directory beside them.
  file(REAL_PATH "${CMAKE_CURRENT_SOURCE_DIR}" project_dir)
  set(root "${project_dir}")
  set(sources "")
  set(source_dirs "")
  set(rewrite_inputs "")
  foreach(source IN LISTS ARG_SOURCES)
    get_filename_component(source_path "${source}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    get_filename_component(source_dir "${source_path}" DIRECTORY)
    list(APPEND source_dirs "${source_dir}")
    list(FIND no_rewrite "${source_path}" skip)
    if(NOT rewrite_tool OR NOT skip EQUAL -1 OR NOT source_path MATCHES "\\.(cpp|cc|cxx|c\\+\\+|C)$")
      list(APPEND sources "${source_path}")
      continue()
    endif()
    list(APPEND rewrite_inputs "${source_path}")
    file(REAL_PATH "${source_dir}" real_dir)
    cmake_path(IS_PREFIX root "${real_dir}" under_root)
    while(NOT under_root)
      cmake_path(GET root PARENT_PATH root)
      cmake_path(IS_PREFIX root "${real_dir}" under_root)
    endwhile()
  endforeach()

  if(rewrite_inputs)
    set(rewrite_outputs "")
    set(relatives "")
    foreach(source_path IN LISTS rewrite_inputs)
      file(REAL_PATH "${source_path}" real_path)
      file(RELATIVE_PATH relative "${root}" "${real_path}")
      list(APPEND relatives "${relative}")
      list(APPEND rewrite_outputs "${out_dir}/${relative}")
    endforeach()
    set(depfile_args "")
    set(depfile_flags "")
    if(use_depfile)
      set(depfile_args DEPFILE "${out_dir}/accel-rewrite.d")
      set(depfile_flags "--depfile=${out_dir}/accel-rewrite.d")
    endif()
    set(preamble_flags "")
    if(ACCELERATE_PREAMBLE_CACHE)
      # The parse of each source's #include block is kept between builds (and shared by the sources of one
      # directory that include the same headers); a header it read that changes makes a new one.
      set(preamble_flags "--preamble-cache=${ACCELERATE_PREAMBLE_CACHE}")
    endif()
    set(make_directory COMMAND "${CMAKE_COMMAND}" -E make_directory "${out_dir}")
    # The rewrite parses the original headers, never the copies: the include directories mirrored into the
    # output directory (below) are left out of its flags.
    string(REGEX REPLACE "([][+.*()^$?|\\\\])" "\\\\\\1" out_dir_regex "${out_dir}")
    set(parse_includes "$<FILTER:${includes},EXCLUDE,^${out_dir_regex}(/|$)>")
    list(JOIN relatives " " comment)
    add_custom_command(
      OUTPUT ${rewrite_outputs}
      ${make_directory}
      COMMAND "${rewrite_tool}" ${rewrite_inputs} --output-dir=${out_dir} --root=${root}
              --headers=${project_dir} --line-directives ${depfile_flags} ${preamble_flags} ${pass_flags} --
              "-std=c++$<IF:$<BOOL:${standard}>,${standard},17>"
              "$<$<BOOL:${parse_includes}>:-I$<JOIN:${parse_includes},;-I>>"
              "$<$<BOOL:${definitions}>:-D$<JOIN:${definitions},;-D>>"
              "${options}" ${cxx_flags}
      DEPENDS ${rewrite_inputs} ${rewrite_depends}
      ${depfile_args}
      COMMENT "accel-rewrite ${comment}"
      COMMAND_EXPAND_LISTS
      VERBATIM)
    list(APPEND sources ${rewrite_outputs})
  endif()

  add_executable(${target} ${sources})
  list(REMOVE_DUPLICATES source_dirs)
  # The rewritten copies live in the build tree; their quoted includes still resolve beside the originals.
  target_include_directories(${target} PRIVATE ${source_dirs})
  if(rewrite_inputs)
    # The headers' copies come first: each include directory under the mirrored root is searched in the
    # output directory before the source tree, once the directory's CMakeLists.txt has set them all.
    cmake_language(EVAL CODE "cmake_language(DEFER CALL _accelerate_mirror_includes [[${target}]] [[${root}]] [[${out_dir}]])")
  endif()
  target_link_libraries(${target} PRIVATE accelerate::runtime)
  if(rewrite_inputs)
    # Editors open the user's own sources, not the rewritten copies: compile_commands.json lists them, with
    # the target's flags less the copies' include directories, through an object library that is never built
    # (EXCLUDE_FROM_ALL), so clangd, accel-lsp and the clang-tidy module (`-p <build dir>`) parse train.cpp
    # with its real flags rather than a neighbour's (docs/ide.md).
    add_library(${target}_editor_sources OBJECT EXCLUDE_FROM_ALL ${rewrite_inputs})
    target_include_directories(${target}_editor_sources PRIVATE "${parse_includes}")
    target_compile_definitions(${target}_editor_sources PRIVATE "${definitions}")
    target_compile_options(${target}_editor_sources PRIVATE "$<TARGET_PROPERTY:${target},COMPILE_OPTIONS>")
    # Linked as the target links the runtime, so Torch's directories are -isystem as in the target's own command.
    target_link_libraries(${target}_editor_sources PRIVATE accelerate::runtime)
    set_target_properties(${target}_editor_sources PROPERTIES EXPORT_COMPILE_COMMANDS ON)
  endif()
  if(TARGET accelerate_torch_pch)
    # In this project's own tree, share the runtime's precompiled <torch/torch.h>.
    target_precompile_headers(${target} REUSE_FROM accelerate_torch_pch)
  endif()
  get_property(torch_library_dir GLOBAL PROPERTY ACCELERATE_TORCH_LIBRARY_DIR)
  if(torch_library_dir)
    set_target_properties(${target} PROPERTIES BUILD_RPATH "${torch_library_dir}")
  endif()
endfunction()

# The include directories of <target> that lie under <root>, mirrored into <out_dir>, put before the others.
function(_accelerate_mirror_includes target root out_dir)
  get_target_property(directories ${target} INCLUDE_DIRECTORIES)
  set(mirrored "")
  foreach(directory IN LISTS directories)
    if(directory MATCHES "\\$<" OR NOT IS_ABSOLUTE "${directory}")
      continue()
    endif()
    file(REAL_PATH "${directory}" real_directory)
    cmake_path(IS_PREFIX root "${real_directory}" under_root)
    cmake_path(IS_PREFIX out_dir "${real_directory}" in_output)
    if(under_root AND NOT in_output)
      file(RELATIVE_PATH relative "${root}" "${real_directory}")
      list(APPEND mirrored "${out_dir}/${relative}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES mirrored)
  if(mirrored)
    target_include_directories(${target} BEFORE PRIVATE ${mirrored})
  endif()
endfunction()
