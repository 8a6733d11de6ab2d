# calo_add_module(NAME [DEPS target...] [SOURCES file...])
# One static library per module under src/NAME/: every .cpp there unless SOURCES is given.
# Headers are included by module path ("model/model_spec.h"), src/ is the include root.
function(calo_add_module name)
  cmake_parse_arguments(ARG "" "" "DEPS;SOURCES" ${ARGN})
  if(ARG_SOURCES)
    set(sources ${ARG_SOURCES})
  else()
    file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${name}/*.cpp)
  endif()
  if(NOT sources)
    add_library(calo_${name} INTERFACE)  # module not written yet
    target_include_directories(calo_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(calo_${name} INTERFACE ${ARG_DEPS})
    return()
  endif()
  add_library(calo_${name} STATIC ${sources})
  target_include_directories(calo_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(calo_${name} PUBLIC ${ARG_DEPS} PRIVATE calo_warnings)
  set_target_properties(calo_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

# calo_add_test_suite(MODULE LABEL [DEPS target...])
# One GoogleTest executable per tests/MODULE folder; each test case becomes a CTest test with LABEL.
function(calo_add_test_suite module label)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${module}/*_test.cpp)
  if(NOT sources)
    return()
  endif()
  add_executable(${module}_tests ${sources})
  target_link_libraries(${module}_tests PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main calo_warnings)
  target_compile_definitions(${module}_tests PRIVATE
    CALO_SOURCE_DIR="${PROJECT_SOURCE_DIR}" CALO_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${module}_tests
    PROPERTIES LABELS ${label} ENVIRONMENT "CALO_DATA_DIR=${PROJECT_SOURCE_DIR}/data"
    DISCOVERY_TIMEOUT 60)
endfunction()
