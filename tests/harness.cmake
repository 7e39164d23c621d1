# Tests of the harness: statistics, processes, solution loading, the CLI, and (gpu) whole grades.

# Deliberately broken solutions (tests/solutions/bad_solutions.c), one .so per defect.
foreach(bad abi_version missing_teardown segfault hang nothing not_supported)
  string(TOUPPER ${bad} BAD)
  add_library(bad_${bad} SHARED ${CMAKE_CURRENT_SOURCE_DIR}/solutions/bad_solutions.c)
  target_include_directories(bad_${bad} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(bad_${bad} PRIVATE BAD_${BAD} BAD_NAME="bad-${bad}")
  set_target_properties(bad_${bad} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests/lib C_STANDARD 99)
  list(APPEND NIBBLE_BAD_SOLUTIONS bad_${bad})
endforeach()

nibble_add_gtest(stats SOURCES test_stats.cpp LIBS nibble_runtime LABELS cpu)
nibble_add_gtest(process SOURCES test_process.cpp LIBS nibble_runtime LABELS cpu)
nibble_add_gtest(solution_library SOURCES test_solution_library.cpp LIBS nibble_runtime LABELS cpu)
add_dependencies(test_solution_library ${NIBBLE_BAD_SOLUTIONS})
nibble_add_gtest(cli SOURCES test_cli.cpp LIBS nibble_runtime LABELS cpu)
add_dependencies(test_cli nibble ${NIBBLE_BAD_SOLUTIONS})
nibble_add_gtest(grade_gpu SOURCES test_grade_gpu.cpp LIBS nibble_runtime LABELS "gpu;slow")
add_dependencies(test_grade_gpu nibble nibble_reference ${NIBBLE_BAD_SOLUTIONS})
if(TARGET nibble_unfused)
  add_dependencies(test_grade_gpu nibble_unfused)
endif()
