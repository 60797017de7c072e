# One call each declares a library, a test, a benchmark or a tool.
#
#   kvferry_library(NAME kv SOURCES a.cc b.cc DEPS kvferry::common [PUBLIC_DEPS ...])
#       -> static library target kvferry_<NAME>, alias kvferry::<NAME>
#   kvferry_test(NAME kv_block_pool_test SOURCES block_pool_test.cc DEPS kvferry::kv
#                [LABELS unit] [TIMEOUT 120])
#       -> gtest executable registered with CTest (one CTest entry per binary)
#   kvferry_benchmark(NAME kv_bench SOURCES kv_bench.cc DEPS kvferry::kv)
#       -> Google Benchmark executable in bin/ (not run by ctest)
include_guard(GLOBAL)
include(GNUInstallDirs)

function(kvferry_library)
  cmake_parse_arguments(A "" "NAME" "SOURCES;DEPS;PUBLIC_DEPS" ${ARGN})
  add_library(kvferry_${A_NAME} STATIC ${A_SOURCES})
  add_library(kvferry::${A_NAME} ALIAS kvferry_${A_NAME})
  # Installed (cmake/kvferry_install.cmake) as kvferry::<NAME> with only the public headers;
  # src/ is for the build tree (tests and tools include internal headers).
  set_target_properties(kvferry_${A_NAME} PROPERTIES EXPORT_NAME ${A_NAME})
  target_include_directories(kvferry_${A_NAME} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(kvferry_${A_NAME} PUBLIC ${A_PUBLIC_DEPS} ${A_DEPS})
  if(KVFERRY_FUZZ_INSTRUMENT AND NOT A_NAME STREQUAL "engine")
    target_compile_options(kvferry_${A_NAME} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
endfunction()

function(kvferry_test)
  cmake_parse_arguments(A "" "NAME;TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT KVFERRY_TESTS)
    return()
  endif()
  add_executable(${A_NAME} ${A_SOURCES})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  add_test(NAME ${A_NAME} COMMAND ${A_NAME})
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  set_tests_properties(${A_NAME} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT})
endfunction()

function(kvferry_benchmark)
  cmake_parse_arguments(A "" "NAME" "SOURCES;DEPS" ${ARGN})
  if(NOT KVFERRY_BENCH)
    return()
  endif()
  add_executable(${A_NAME} ${A_SOURCES})
  target_link_libraries(${A_NAME} PRIVATE ${A_DEPS} benchmark::benchmark)
  set_target_properties(${A_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bin)
endfunction()
