# Fails when the public headers pull in c10d, Gloo, CUDA runtime or NCCL headers: the runtime keeps those behind
# its own types, which keeps user compile times and the rewriter's parse fast.
#
#   cmake -DCXX=<compiler> -DINCLUDE_DIR=<include> "-DFLAGS=<-I...;-D...>" -DWORK=<dir> -P check_public_headers.cmake
file(GLOB_RECURSE headers RELATIVE "${INCLUDE_DIR}" "${INCLUDE_DIR}/accelerate/*.h")
list(SORT headers)
set(tu "// Every public header, the umbrella first.\n#include <accelerate/accelerate.h>\n")
foreach(header IN LISTS headers)
  string(APPEND tu "#include <${header}>\n")
endforeach()
file(MAKE_DIRECTORY "${WORK}")
file(WRITE "${WORK}/public_headers.cpp" "${tu}")
execute_process(COMMAND "${CXX}" -std=c++17 -M -I${INCLUDE_DIR} ${FLAGS} "${WORK}/public_headers.cpp"
                RESULT_VARIABLE rc OUTPUT_VARIABLE deps ERROR_VARIABLE errors)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "preprocessing the public headers failed (${rc}):\n${errors}")
endif()
string(REGEX REPLACE "[ \\\\\n]+" ";" deps "${deps}")
set(forbidden "")
foreach(dep IN LISTS deps)
  if(dep MATCHES "/c10d/|/gloo/|/cuda_runtime[^/]*\\.h$|/nccl[^/]*\\.h$")
    list(APPEND forbidden "${dep}")
  endif()
endforeach()
list(LENGTH headers count)
if(forbidden)
  list(JOIN forbidden "\n  " forbidden)
  message(FATAL_ERROR "the public headers include c10d/Gloo/CUDA/NCCL headers; keep them behind the runtime's "
                      "own types (in runtime/*.cpp):\n  ${forbidden}")
endif()
list(LENGTH deps files)
message(STATUS "${count} public headers read ${files} files; none from c10d, Gloo, the CUDA runtime or NCCL")
