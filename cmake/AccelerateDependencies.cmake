# Finds Torch (from the PyPI wheel) and LLVM/Clang 19 for the parts that are enabled.

include(GNUInstallDirs)

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
  if(NOT PROJECT_IS_TOP_LEVEL)
    # Built by add_subdirectory()/FetchContent: the parent's targets link accelerate::runtime, whose usage
    # requirements name Torch's imported targets, so those must be visible outside this directory.
    get_property(_accel_imported DIRECTORY PROPERTY IMPORTED_TARGETS)
    foreach(_target IN LISTS _accel_imported)
      set_property(TARGET ${_target} PROPERTY IMPORTED_GLOBAL TRUE)
    endforeach()
  endif()
  # What the installed package checks a consumer's Torch against (libtorch has no ABI stability).
  # (torch >= 2.7 sets no TORCH_CXX_FLAGS: it is built with the C++11 ABI only.)
  set(ACCEL_TORCH_CXX11_ABI 1)
  if(TORCH_CXX_FLAGS MATCHES "_GLIBCXX_USE_CXX11_ABI=([01])")
    set(ACCEL_TORCH_CXX11_ABI ${CMAKE_MATCH_1})
  endif()
  # Installed libraries and binaries find libtorch, the wheel's NVIDIA libraries and each other at run time.
  set(ACCEL_INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}" "${TORCH_INSTALL_PREFIX}/lib")
  file(GLOB _accel_nvidia_lib_dirs LIST_DIRECTORIES true "${TORCH_INSTALL_PREFIX}/../nvidia/*/lib")
  foreach(_dir IN LISTS _accel_nvidia_lib_dirs)
    if(IS_DIRECTORY "${_dir}")
      get_filename_component(_dir "${_dir}" REALPATH)
      list(APPEND ACCEL_INSTALL_RPATH "${_dir}")
    endif()
  endforeach()
endif()

if(ACCEL_BUILD_REWRITER)
  list(APPEND CMAKE_PREFIX_PATH /usr/lib/llvm-19)
  find_package(Clang 19.1 CONFIG REQUIRED)
  find_package(LLVM 19.1 CONFIG REQUIRED)
  message(STATUS "accelerate-cpp: Clang ${LLVM_PACKAGE_VERSION} from ${Clang_DIR}")
  set(ACCEL_CLANG_RESOURCE_DIR "${LLVM_LIBRARY_DIR}/clang/${LLVM_VERSION_MAJOR}")
  set(ACCEL_LLVM_TOOLS_DIR "${LLVM_TOOLS_BINARY_DIR}")
endif()
