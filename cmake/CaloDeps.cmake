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

# fmt is used header-only (Debian ships only a shared libfmt).
add_library(calo_fmt INTERFACE)
target_compile_definitions(calo_fmt INTERFACE FMT_HEADER_ONLY=1)
target_include_directories(calo_fmt SYSTEM INTERFACE $<TARGET_PROPERTY:fmt::fmt-header-only,INTERFACE_INCLUDE_DIRECTORIES>)

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
if(CALO_SANITIZE)
  target_compile_options(calo_warnings INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer)
  target_link_options(calo_warnings INTERFACE -fsanitize=address,undefined)
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
message(STATUS "calo: CUDA backend ${CALO_HAVE_CUDA}, MPI backend ${CALO_HAVE_MPI}")
