# Locate LibTorch.
#
# Preferred: the PyPI torch wheel in the project's virtualenv (tools/setup.sh makes it); pass
# -DDCPCTL_PYTHON=/path/to/.venv/bin/python and CMake asks torch.utils.cmake_prefix_path.
# Fallback: Debian's libtorch-dev (1.13, CPU-only), found through the default prefix.
#
# Only c10 + torch_cpu are linked (serialization containers and the pickler). We do not call
# find_package(Torch) with CUDA enabled: the wheel's config would drag in the CUDA build
# machinery for libraries we never use; the CPU targets it defines are what we need.
set(DCPCTL_PYTHON "" CACHE FILEPATH "Python interpreter whose torch provides LibTorch")
# pip install (scikit-build-core): the interpreter running the build, whose torch it is.
if(NOT DCPCTL_PYTHON AND SKBUILD AND Python_EXECUTABLE)
  set(DCPCTL_PYTHON "${Python_EXECUTABLE}")
endif()

if(DCPCTL_PYTHON)
  execute_process(
    # Where the package is, without importing it (torch.utils.cmake_prefix_path is torch/share/cmake):
    # importing torch loads its CUDA libraries, which `tools/dev.sh demo` does not install (the build
    # needs only the headers and libtorch_cpu).
    COMMAND "${DCPCTL_PYTHON}" -c "import sys, os, importlib.util, importlib.metadata as m; s = importlib.util.find_spec('torch'); print(os.path.join(os.path.dirname(s.origin), 'share', 'cmake')); print(m.version('torch').split('+')[0]); print(sys.prefix)"
    OUTPUT_VARIABLE _dcpctl_torch_out
    RESULT_VARIABLE _dcpctl_torch_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _dcpctl_torch_rc EQUAL 0)
    message(FATAL_ERROR "DCPCTL_PYTHON=${DCPCTL_PYTHON} has no torch package; run tools/dev.sh setup")
  endif()
  string(REPLACE "\n" ";" _dcpctl_torch_out "${_dcpctl_torch_out}")
  list(GET _dcpctl_torch_out 0 _dcpctl_torch_prefix)
  list(GET _dcpctl_torch_out 2 DCPCTL_PYTHON_PREFIX)  # the environment a pip install goes into
  list(PREPEND CMAKE_PREFIX_PATH "${_dcpctl_torch_prefix}")
  set(DCPCTL_LIBTORCH_SOURCE "PyPI wheel (${DCPCTL_PYTHON})")
else()
  set(DCPCTL_LIBTORCH_SOURCE "system")
endif()

# The Caffe2 config probes CUDA when the wheel was built with it; we only want the CPU side.
set(USE_CUDA OFF CACHE BOOL "" FORCE)
set(CAFFE2_USE_CUDNN OFF CACHE BOOL "" FORCE)
find_package(Torch REQUIRED CONFIG)

set(DCPCTL_LIBTORCH_VERSION "${Torch_VERSION}")
message(STATUS "dcpctl: LibTorch ${DCPCTL_LIBTORCH_VERSION} from ${DCPCTL_LIBTORCH_SOURCE}")

get_target_property(_c10_inc c10 INTERFACE_INCLUDE_DIRECTORIES)
add_library(dcpctl_libtorch INTERFACE)
target_link_libraries(dcpctl_libtorch INTERFACE torch_cpu c10)
if(TORCH_INCLUDE_DIRS)
  target_include_directories(dcpctl_libtorch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
endif()
# The wheel's libraries carry the ABI flag in TORCH_CXX_FLAGS; we must compile with the same.
if(TORCH_CXX_FLAGS)
  separate_arguments(_dcpctl_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
  add_compile_options(${_dcpctl_torch_flags})
endif()
