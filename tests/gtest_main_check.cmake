# gtest_main_check.cmake: runs test_gtest_main (-DBIN=...) in each mode and checks the exit code
# that tests/gtest_main.cpp gives CTest: every case skipped 77, a failure beside a skip 1, a pass
# beside a skip 0.
foreach(case "skip=77" "skip_fail=1" "skip_pass=0")
  string(REPLACE "=" ";" kv "${case}")
  list(GET kv 0 mode)
  list(GET kv 1 want)
  execute_process(COMMAND ${CMAKE_COMMAND} -E env NIBBLE_GTEST_MAIN_CASE=${mode} ${BIN}
                  RESULT_VARIABLE got OUTPUT_QUIET ERROR_QUIET)
  if(NOT "${got}" STREQUAL "${want}")
    message(FATAL_ERROR "test_gtest_main in mode ${mode} exited ${got}, expected ${want}")
  endif()
  message(STATUS "mode ${mode}: exit ${got} as expected")
endforeach()
