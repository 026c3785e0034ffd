# Finds Torch (from the PyPI wheel) and LLVM/Clang 19 for the parts that are enabled.

if(ACCEL_BUILD_RUNTIME)
  if(NOT ACCEL_PYTHON)
    # Where scripts/bootstrap.sh installs torch.
    execute_process(COMMAND ${PROJECT_SOURCE_DIR}/scripts/bootstrap.sh --print-venv
                    OUTPUT_VARIABLE _accel_venv OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_accel_venv AND EXISTS "${_accel_venv}/bin/python")
      set(ACCEL_PYTHON "${_accel_venv}/bin/python" CACHE FILEPATH "Python interpreter with torch installed" FORCE)
    endif()
  endif()
  if(NOT Torch_DIR)
    foreach(py IN ITEMS "${ACCEL_PYTHON}" python3)
      if(py)
        execute_process(COMMAND ${py} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                        OUTPUT_VARIABLE _accel_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                        RESULT_VARIABLE _accel_torch_rc ERROR_QUIET)
        if(_accel_torch_rc EQUAL 0 AND _accel_torch_prefix)
          list(APPEND CMAKE_PREFIX_PATH "${_accel_torch_prefix}")
          break()
        endif()
      endif()
    endforeach()
  endif()
  # The wheel's TorchConfig needs a CUDA toolkit at configure time even for a CPU-only run.
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  find_package(Torch QUIET)
  if(NOT Torch_FOUND)
    message(FATAL_ERROR "accelerate-cpp: libtorch (torch 2.11.0) not found. Run scripts/bootstrap.sh (or `make`), "
                        "pass -DACCEL_PYTHON=<python with torch> or -DTorch_DIR=<libtorch>/share/cmake/Torch, or "
                        "configure with -DACCEL_BUILD_RUNTIME=OFF to build the rewriter alone")
  endif()
  message(STATUS "accelerate-cpp: Torch ${Torch_VERSION} from ${Torch_DIR}")
endif()

if(ACCEL_BUILD_REWRITER)
  list(APPEND CMAKE_PREFIX_PATH /usr/lib/llvm-19)
  find_package(Clang 19.1 CONFIG REQUIRED)
  find_package(LLVM 19.1 CONFIG REQUIRED)
  message(STATUS "accelerate-cpp: Clang ${LLVM_PACKAGE_VERSION} from ${Clang_DIR}")
  set(ACCEL_CLANG_RESOURCE_DIR "${LLVM_LIBRARY_DIR}/clang/${LLVM_VERSION_MAJOR}")
  set(ACCEL_LLVM_TOOLS_DIR "${LLVM_TOOLS_BINARY_DIR}")
endif()
