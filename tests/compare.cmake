# Tests of reading reports back: nibble compare (statistics against scipy's numbers, verdicts and
# exit codes on recorded H200 reports), nibble report show, nibble report html (+ headless Chromium).
nibble_add_gtest(compare SOURCES test_compare.cpp LIBS nibble_reports LABELS cpu)
add_dependencies(test_compare nibble)
nibble_add_gtest(html_report SOURCES test_html_report.cpp LIBS nibble_reports LABELS cpu)
# So the executables also find tests/data/ when run by hand, outside CTest.
target_compile_definitions(test_compare PRIVATE NIBBLE_TEST_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                           NIBBLE_TEST_BINARY_DIR="${PROJECT_BINARY_DIR}")
target_compile_definitions(test_html_report PRIVATE NIBBLE_TEST_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
nibble_add_gtest(lineup SOURCES test_lineup.cpp LIBS nibble_reports LABELS cpu)
nibble_add_gtest(profile SOURCES test_profile.cpp LIBS nibble_runtime LABELS cpu)
nibble_add_gtest(batch SOURCES test_batch.cpp LIBS nibble_reports LABELS cpu)
target_compile_definitions(test_batch PRIVATE NIBBLE_TEST_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
# The leaderboard's baselines are checked against the names the bundled solutions report (dlopen).
nibble_test_needs_solutions(test_lineup decode gemm_fp4)
foreach(ref nibble_reference nibble_gemm_reference)
  if(TARGET ${ref})
    add_dependencies(test_lineup ${ref})
  endif()
endforeach()
