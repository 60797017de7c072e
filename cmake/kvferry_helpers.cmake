# One call each declares a library, a test, a benchmark or a tool.
#
#   kvferry_library(NAME kv SOURCES a.cc b.cc DEPS kvferry::common [PUBLIC_DEPS ...])
#       -> static library target kvferry_<NAME>, alias kvferry::<NAME>
#   kvferry_test(NAME kv_block_pool_test SOURCES block_pool_test.cc DEPS kvferry::kv
#                [LABELS unit] [TIMEOUT 120])
#       -> gtest executable registered with CTest (one CTest entry per binary)
#   kvferry_benchmark(NAME kv_bench SOURCES kv_bench.cc DEPS kvferry::kv)
#       -> Google Benchmark executable in bin/ (not run by ctest)
#   kvferry_sanitizer_timeouts()
#       -> in a sanitizer build, every TIMEOUT of this directory's tests times
#          KVFERRY_SANITIZER_TIMEOUT_SCALE (kvferry_test calls it; a directory that declares
#          tests with add_test calls it once)
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
  kvferry_sanitizer_timeouts()
endfunction()

# A test's TIMEOUT is set for the plain build; under ASan or TSan the same work runs several times
# slower, by how much depends on the machine (cli_quantize computes MoE models for minutes under
# ASan). CMake 3.25 sets test properties only from the directory that declares the test, so this
# defers, once per directory, to the end of that directory's CMakeLists.txt, when all its tests
# exist. The plain build's limits stay as declared.
set(KVFERRY_SANITIZER_TIMEOUT_SCALE 3 CACHE STRING
    "Factor applied to every test's TIMEOUT in a sanitizer build (KVFERRY_SANITIZE)")

function(kvferry_sanitizer_timeouts)
  get_property(scheduled DIRECTORY PROPERTY KVFERRY_TIMEOUTS_SCALED)
  if(NOT KVFERRY_SANITIZE OR scheduled)
    return()
  endif()
  set_property(DIRECTORY PROPERTY KVFERRY_TIMEOUTS_SCALED ON)
  cmake_language(DEFER CALL _kvferry_scale_directory_timeouts)
endfunction()

function(_kvferry_scale_directory_timeouts)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(test IN LISTS tests)
    get_test_property(${test} TIMEOUT limit)
    if(limit)
      math(EXPR scaled "${limit} * ${KVFERRY_SANITIZER_TIMEOUT_SCALE}")
      set_tests_properties(${test} PROPERTIES TIMEOUT ${scaled})
    endif()
  endforeach()
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
