# kvserve_module(NAME DEPS a b c): one folder = one static library `kvserve_NAME`,
# built from every .cc in the folder (and its cpu/ subfolder for kernels).
function(kvserve_module name)
  cmake_parse_arguments(ARG "" "" "DEPS;SOURCES" ${ARGN})
  if(ARG_SOURCES)
    set(srcs ${ARG_SOURCES})
  else()
    file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  endif()
  add_library(kvserve_${name} STATIC ${srcs})
  target_include_directories(kvserve_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(kvserve_${name} PUBLIC ${ARG_DEPS})
endfunction()

# kvserve_test(NAME DEPS ...): one GoogleTest binary from every *_test.cc in the folder.
function(kvserve_test name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  add_executable(${name}_test ${srcs})
  target_include_directories(${name}_test PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${name}_test PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name}_test PRIVATE
    KVSERVE_SHARED_DIR="${PROJECT_SOURCE_DIR}/../shared"
    KVSERVE_BINARY_DIR="${PROJECT_BINARY_DIR}")
  gtest_discover_tests(${name}_test DISCOVERY_TIMEOUT 120 PROPERTIES LABELS ${name})
endfunction()
