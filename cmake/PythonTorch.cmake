# The torch of the Python environment that `pip install .` installs into,
# for the LibTorch collector of the Python package.
#
# Found through that environment's site-packages (sysconfig), not by importing
# torch: under pip's build isolation the build runs with the same interpreter
# and prefix but cannot import the environment's packages. The wheel's own
# TorchConfig.cmake is not used: it looks for CUDA, protobuf, gflags and
# libtorch itself in the system paths first, so on a machine with Debian's
# libtorch-dev it mixes that LibTorch 1.13 in.
#
# Sets in the caller's scope: Torch_FOUND, TORCH_LIBRARIES (an imported
# target), TRAINPROF_TORCH_VERSION ("2.15.0+cu132") and, when torch is
# missing or unusable, TRAINPROF_TORCH_MISSING_REASON.
function(trainprof_find_python_torch)
  set(Torch_FOUND OFF PARENT_SCOPE)
  set(TRAINPROF_TORCH_VERSION "" PARENT_SCOPE)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
            "import sysconfig; print(sysconfig.get_path('platlib')); print(sysconfig.get_path('purelib'))"
    OUTPUT_VARIABLE site_dirs OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    set(TRAINPROF_TORCH_MISSING_REASON "cannot ask ${Python_EXECUTABLE} for its site-packages" PARENT_SCOPE)
    return()
  endif()
  string(REPLACE "\n" ";" site_dirs "${site_dirs}")
  list(REMOVE_DUPLICATES site_dirs)
  set(torch_dir "")
  foreach(dir IN LISTS site_dirs)
    if(EXISTS "${dir}/torch/include/ATen/record_function.h" AND EXISTS "${dir}/torch/lib/libtorch_cpu.so")
      set(torch_dir "${dir}/torch")
      break()
    endif()
  endforeach()
  if(NOT torch_dir)
    set(TRAINPROF_TORCH_MISSING_REASON "no torch with C++ headers in ${site_dirs}" PARENT_SCOPE)
    return()
  endif()

  file(STRINGS "${torch_dir}/version.py" version_line REGEX "^__version__ = ")
  string(REGEX REPLACE "^__version__ = ['\"]([^'\"]+)['\"].*" "\\1" version "${version_line}")
  # Wheels before torch 2.7 were built with the pre-C++11 std::string ABI;
  # the collector shares std::string with libtrainprof, which uses the new one.
  file(STRINGS "${torch_dir}/share/cmake/Torch/TorchConfig.cmake" old_abi REGEX "_GLIBCXX_USE_CXX11_ABI=0")
  if(old_abi)
    set(TRAINPROF_TORCH_MISSING_REASON
        "torch ${version} uses the pre-C++11 std::string ABI (torch wheels before 2.7); install torch >= 2.7"
        PARENT_SCOPE)
    return()
  endif()

  if(NOT TARGET trainprof_python_torch)
    add_library(trainprof_python_torch INTERFACE IMPORTED GLOBAL)
    # -isystem: LibTorch's headers are not ours to keep warning-free.
    set_target_properties(trainprof_python_torch PROPERTIES
      INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${torch_dir}/include"
      INTERFACE_INCLUDE_DIRECTORIES "${torch_dir}/include"
      INTERFACE_LINK_LIBRARIES "${torch_dir}/lib/libtorch_cpu.so;${torch_dir}/lib/libc10.so")
  endif()
  set(Torch_FOUND ON PARENT_SCOPE)
  set(TORCH_LIBRARIES trainprof_python_torch PARENT_SCOPE)
  set(TRAINPROF_TORCH_VERSION "${version}" PARENT_SCOPE)
  set(TRAINPROF_TORCH_LIB_DIR "${torch_dir}/lib" PARENT_SCOPE)
endfunction()
