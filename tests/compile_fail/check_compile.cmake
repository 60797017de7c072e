# cmake -DCXX=... -DSRC=... -DINCLUDE_DIR=... -DSRC_DIR=... -DCASE=... -DEXPECT=pass|fail
#       -P check_compile.cmake
# Compiles SRC (syntax only) with -DKVF_CASE_<CASE>. EXPECT=pass: must compile. EXPECT=fail: must
# fail with a diagnostic that names LogicalBlockId or KernelBlockId.
execute_process(
  COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE_DIR} -I${SRC_DIR} -DKVF_CASE_${CASE} ${SRC}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)
if(EXPECT STREQUAL "pass")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "control program does not compile (rc=${rc}):\n${out}")
  endif()
  message(STATUS "control compiles")
else()
  if(rc EQUAL 0)
    message(FATAL_ERROR "case ${CASE} COMPILED: the id types mix")
  endif()
  if(NOT out MATCHES "(Logical|Kernel)BlockId")
    message(FATAL_ERROR "case ${CASE} failed for an unrelated reason:\n${out}")
  endif()
  message(STATUS "case ${CASE} is rejected by the compiler, as it must be")
endif()
