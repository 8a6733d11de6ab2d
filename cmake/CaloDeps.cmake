# Third-party dependencies. Non-CUDA libraries are header-only or static so that the `calo` binary built on a
# Debian machine also runs on a GPU host that lacks these packages (see docs/DEPENDENCIES.md).
find_package(Threads REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)

# yaml-cpp and SQLite: static archives from Debian's -dev packages.
find_path(YAML_CPP_INCLUDE_DIR yaml-cpp/yaml.h REQUIRED)
find_library(YAML_CPP_STATIC_LIB NAMES libyaml-cpp.a REQUIRED)
add_library(calo_yaml INTERFACE)
target_include_directories(calo_yaml SYSTEM INTERFACE ${YAML_CPP_INCLUDE_DIR})
target_link_libraries(calo_yaml INTERFACE ${YAML_CPP_STATIC_LIB})

find_path(SQLITE3_INCLUDE_DIR sqlite3.h REQUIRED)
find_library(SQLITE3_STATIC_LIB NAMES libsqlite3.a REQUIRED)
add_library(calo_sqlite INTERFACE)
target_include_directories(calo_sqlite SYSTEM INTERFACE ${SQLITE3_INCLUDE_DIR})
target_link_libraries(calo_sqlite INTERFACE ${SQLITE3_STATIC_LIB} Threads::Threads ${CMAKE_DL_LIBS} m)

# zlib (gzip-compressed Kineto traces): the static archive from Debian's zlib1g-dev.
find_path(ZLIB_STATIC_INCLUDE_DIR zlib.h REQUIRED)
find_library(ZLIB_STATIC_LIB NAMES libz.a REQUIRED)
add_library(calo_zlib INTERFACE)
target_include_directories(calo_zlib SYSTEM INTERFACE ${ZLIB_STATIC_INCLUDE_DIR})
target_link_libraries(calo_zlib INTERFACE ${ZLIB_STATIC_LIB})

# fmt: Debian ships only a shared libfmt, so its out-of-line code is compiled once into a static calo_fmt
# (cmake/fmt/fmt_compiled.cpp) rather than header-only in every file, which doubled each file's compile time.
add_library(calo_fmt STATIC ${CMAKE_CURRENT_LIST_DIR}/fmt/fmt_compiled.cpp)
target_include_directories(calo_fmt SYSTEM PUBLIC $<TARGET_PROPERTY:fmt::fmt-header-only,INTERFACE_INCLUDE_DIRECTORIES>)
set_target_properties(calo_fmt PROPERTIES POSITION_INDEPENDENT_CODE ON)

# Common warnings for every project target.
add_library(calo_warnings INTERFACE)
target_compile_options(calo_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Wunused -Woverloaded-virtual -Wimplicit-fallthrough>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${CALO_WERROR}>>:-Werror>
  # GCC 12 reports false -Wrestrict / -Wstringop-overflow / -Warray-bounds on inlined std::string code at
  # -O2/-O3 (GCC bugs 105329, 106199, 105651; fixed in 13); other compilers keep the warnings.
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict
  -Wno-stringop-overflow -Wno-array-bounds>)
# Sanitizers (scripts/sanitize.sh): every undefined-behaviour report is fatal (-fno-sanitize-recover=all).
if(CALO_SANITIZE)
  target_compile_options(calo_warnings INTERFACE -fsanitize=address,undefined -fno-sanitize-recover=all
    -fno-omit-frame-pointer)
  target_link_options(calo_warnings INTERFACE -fsanitize=address,undefined -fno-sanitize-recover=all)
endif()
# libFuzzer targets (tests/fuzz/, clang only): the project's code gets coverage instrumentation; the targets
# link libFuzzer's main. With CALO_SANITIZE the same build serves the sanitizer tests and the fuzzers.
if(CALO_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "CALO_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++-14")
  endif()
  target_compile_options(calo_warnings INTERFACE -fsanitize=fuzzer-no-link)
endif()

# MPI for the CPU backend (dynamic: it is the system's own).
if(NOT CALO_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(CALO_MPI STREQUAL "ON" AND NOT MPI_C_FOUND)
    message(FATAL_ERROR "CALO_MPI=ON but no MPI found: install libopenmpi-dev or set -DCALO_MPI=OFF")
  endif()
endif()
set(CALO_HAVE_MPI ${MPI_C_FOUND})

# CUDA backend.
set(CALO_HAVE_CUDA OFF)
if(NOT CALO_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CALO_HAVE_CUDA ON)
  elseif(CALO_CUDA STREQUAL "ON")
    message(FATAL_ERROR "CALO_CUDA=ON but nvcc was not found: put the CUDA toolkit on PATH or set -DCALO_CUDA=OFF")
  endif()
endif()

# cuDNN fused attention (CUDA backend only): cuDNN 9 from the CUDA toolkit, linked dynamically, driven through
# NVIDIA's header-only cudnn_frontend (scripts/install_deps.sh unpacks it into .whl/cudnn_frontend/include; its
# headers are SYSTEM includes). Without either, attention uses the cuBLASLt fallback (docs/EXECUTION_CUDA.md).
set(CALO_HAVE_CUDNN OFF)
if(CALO_HAVE_CUDA)
  find_path(CALO_CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${PROJECT_SOURCE_DIR}/.whl/cudnn_frontend/include)
  find_path(CALO_CUDNN_INCLUDE_DIR cudnn.h HINTS /usr/local/cuda/include /usr/include)
  find_library(CALO_CUDNN_LIB NAMES cudnn HINTS /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu)
  if(CALO_CUDNN_FRONTEND_INCLUDE_DIR AND CALO_CUDNN_INCLUDE_DIR AND CALO_CUDNN_LIB)
    set(CALO_HAVE_CUDNN ON)
    add_library(calo_cudnn INTERFACE)
    target_include_directories(calo_cudnn SYSTEM INTERFACE ${CALO_CUDNN_FRONTEND_INCLUDE_DIR} ${CALO_CUDNN_INCLUDE_DIR})
    target_link_libraries(calo_cudnn INTERFACE ${CALO_CUDNN_LIB})
    message(STATUS "calo: cuDNN ${CALO_CUDNN_LIB}, cudnn_frontend ${CALO_CUDNN_FRONTEND_INCLUDE_DIR}")
  else()
    message(STATUS "calo: cuDNN or cudnn_frontend.h not found (run scripts/install_deps.sh); attention uses the "
                   "cuBLASLt fallback")
  endif()
endif()

message(STATUS "calo: CUDA backend ${CALO_HAVE_CUDA}, MPI backend ${CALO_HAVE_MPI}")
