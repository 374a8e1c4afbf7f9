# Finds what ember builds against and says what it found. Required: LuaJIT, OpenBLAS,
# OpenMP. Optional (a feature is switched off, never a failed build): ZeroMQ, libyaml,
# MPI, readline, CUDA toolkit, cuDNN, NCCL.
find_package(PkgConfig REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS C)

# LuaJIT
pkg_check_modules(LUAJIT REQUIRED luajit)
find_library(LUAJIT_LIBRARY NAMES luajit-5.1 HINTS ${LUAJIT_LIBRARY_DIRS} REQUIRED)
find_path(LUAJIT_INCLUDE_DIR luajit.h HINTS ${LUAJIT_INCLUDE_DIRS} REQUIRED)
find_program(LUAJIT_EXECUTABLE NAMES luajit REQUIRED)

# OpenBLAS: prefer the OpenMP build so that BLAS and ember's own loops share one pool.
find_library(EMBER_BLAS_LIBRARY NAMES openblas
  PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
  NO_DEFAULT_PATH)
if(NOT EMBER_BLAS_LIBRARY)
  find_library(EMBER_BLAS_LIBRARY NAMES openblas REQUIRED)
endif()
find_path(EMBER_BLAS_INCLUDE_DIR cblas.h
  PATHS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp
        /usr/include/openblas /usr/include REQUIRED)

set(EMBER_FEATURES "openblas openmp")

# libyaml (pipelines)
find_library(YAML_LIBRARY NAMES yaml)
find_path(YAML_INCLUDE_DIR yaml.h)
if(YAML_LIBRARY AND YAML_INCLUDE_DIR)
  set(EMBER_HAVE_YAML ON)
  string(APPEND EMBER_FEATURES " yaml")
else()
  set(YAML_LIBRARY "")
endif()

# ZeroMQ (data pipeline)
pkg_check_modules(ZMQ libzmq)
if(ZMQ_FOUND)
  set(EMBER_HAVE_ZMQ ON)
  string(APPEND EMBER_FEATURES " zeromq")
endif()

# MPI (collectives, control plane)
find_package(MPI COMPONENTS C QUIET)
if(MPI_C_FOUND)
  set(EMBER_HAVE_MPI ON)
  string(APPEND EMBER_FEATURES " mpi")
endif()

# Gloo (collectives for torchrun-style starts, runtime/plugins/gloo): a C++ library, called
# through a small C++ shim, so the plugin also needs a C++ compiler.
find_library(EMBER_GLOO_LIBRARY gloo)
find_path(EMBER_GLOO_INCLUDE_DIR gloo/allreduce.h)
include(CheckLanguage)
check_language(CXX)
if(EMBER_GLOO_LIBRARY AND EMBER_GLOO_INCLUDE_DIR AND CMAKE_CXX_COMPILER)
  enable_language(CXX)
  set(EMBER_HAVE_GLOO ON)
  string(APPEND EMBER_FEATURES " gloo")
endif()

# Line editing for the REPL: readline, else libedit, else plain fgets.
find_library(EMBER_READLINE_LIBRARY NAMES readline edit)
find_path(EMBER_READLINE_INCLUDE_DIR readline/readline.h)
if(EMBER_READLINE_LIBRARY AND EMBER_READLINE_INCLUDE_DIR)
  set(EMBER_HAVE_READLINE ON)
  string(APPEND EMBER_FEATURES " readline")
else()
  set(EMBER_READLINE_LIBRARY "")
endif()

# CUDA toolkit, cuDNN, NCCL. EMBER_CUDA=AUTO builds the CUDA backend (the plugin
# libember_cuda.so, runtime/plugins/cuda) when nvcc and cuDNN are found; ON requires them; OFF
# skips it. Native code for sm_90 plus PTX so newer GPUs JIT it; override with
# -DCMAKE_CUDA_ARCHITECTURES="80;90".
set(EMBER_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set(EMBER_HAVE_CUDA OFF)
if(NOT EMBER_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  find_library(EMBER_CUDNN_LIBRARY cudnn PATHS /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
  find_library(EMBER_NCCL_LIBRARY nccl PATHS /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
  find_path(EMBER_CUDNN_INCLUDE_DIR cudnn.h PATHS /usr/local/cuda/include /usr/include)
  find_path(EMBER_NCCL_INCLUDE_DIR nccl.h PATHS /usr/local/cuda/include /usr/include)
  if(CMAKE_CUDA_COMPILER AND EMBER_CUDNN_LIBRARY AND EMBER_CUDNN_INCLUDE_DIR)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)   # sm_90 SASS + compute_90 PTX
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(EMBER_HAVE_CUDA ON)
    string(APPEND EMBER_FEATURES " cuda cudnn")
    if(EMBER_NCCL_LIBRARY AND EMBER_NCCL_INCLUDE_DIR)
      string(APPEND EMBER_FEATURES " nccl")
    endif()
  elseif(EMBER_CUDA STREQUAL "ON")
    message(FATAL_ERROR "EMBER_CUDA=ON but nvcc (${CMAKE_CUDA_COMPILER}) or cuDNN (${EMBER_CUDNN_LIBRARY}) was not found")
  endif()
endif()

message(STATUS "ember features: ${EMBER_FEATURES}")
message(STATUS "  BLAS:     ${EMBER_BLAS_LIBRARY}")
message(STATUS "  LuaJIT:   ${LUAJIT_LIBRARY}")
message(STATUS "  readline: ${EMBER_READLINE_LIBRARY}")
message(STATUS "  CUDA:     ${EMBER_HAVE_CUDA} (${CMAKE_CUDA_COMPILER}, arch ${CMAKE_CUDA_ARCHITECTURES}) cuDNN: ${EMBER_CUDNN_LIBRARY} NCCL: ${EMBER_NCCL_LIBRARY}")
