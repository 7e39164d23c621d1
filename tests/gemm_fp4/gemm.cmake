# Tests of the FP4 dequant-GEMM tasks' CPU foundations (issue 7), label cpu: the e2m1 / e4m3fn /
# e8m0 codecs, the NVFP4 / MXFP4 block quantisers, the tilelang seed's twiddled layout, the configs
# and pinned fixtures, the fp64 oracle with its variants, and the ABI header compiled as C99.
nibble_add_gtest(fp4_codecs SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fp4_codecs.cpp LIBS nibble_fixtures LABELS cpu)
nibble_add_gtest(fp4_quantise SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fp4_quantise.cpp LIBS nibble_fixtures LABELS cpu)
nibble_add_gtest(fp4_twiddle SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fp4_twiddle.cpp LIBS nibble_fixtures LABELS cpu)
nibble_add_gtest(fp4_fixture SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fp4_fixture.cpp LIBS nibble_fixtures LABELS cpu)
if(TARGET nibble_gemm_oracle)
  nibble_add_gtest(fp4_oracle SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fp4_oracle.cpp LIBS nibble_gemm_oracle nibble_runtime LABELS cpu)
endif()

# include/nibble/nibble_gemm.h must compile as strict C99; the test compares the struct layouts the
# C and the C++ compilers see.
add_library(fp4_abi_c99 OBJECT ${CMAKE_CURRENT_LIST_DIR}/test_fp4_abi_c99.c)
target_include_directories(fp4_abi_c99 PRIVATE ${PROJECT_SOURCE_DIR}/include)
set_target_properties(fp4_abi_c99 PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_compile_options(fp4_abi_c99 PRIVATE -Wall -Wextra -Wpedantic -Werror)
nibble_add_gtest(fp4_abi SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fp4_abi.cpp $<TARGET_OBJECTS:fp4_abi_c99> LIBS nibble_fixtures LABELS cpu)

# A CLI over the GEMM fixture builder for tests/python/check_gemm_fixture.py (numpy re-implementation).
add_executable(gemm_fixture_tool ${CMAKE_CURRENT_LIST_DIR}/gemm_fixture_tool.cpp)
target_link_libraries(gemm_fixture_tool PRIVATE nibble_fixtures)
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME nibble.test.fp4_fixture_python
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/check_gemm_fixture.py
                   --tool $<TARGET_FILE:gemm_fixture_tool>)
else()
  add_test(NAME nibble.test.fp4_fixture_python
           COMMAND ${CMAKE_COMMAND} -E echo "python3 not found: run scripts/setup.sh")
  set_tests_properties(nibble.test.fp4_fixture_python PROPERTIES FAIL_REGULAR_EXPRESSION "python3 not found")
endif()
set_tests_properties(nibble.test.fp4_fixture_python PROPERTIES LABELS cpu)

# scripts/gemm_ratios.py and scripts/calibration_table.py (the per-shape tables of reports/) on
# hand-made reports with known speed-ups, margins and exit statuses.
if(Python3_Interpreter_FOUND)
  add_test(NAME nibble.test.report_scripts
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/check_report_scripts.py)
else()
  add_test(NAME nibble.test.report_scripts COMMAND ${CMAKE_COMMAND} -E echo "python3 not found: run scripts/setup.sh")
  set_tests_properties(nibble.test.report_scripts PROPERTIES FAIL_REGULAR_EXPRESSION "python3 not found")
endif()
set_tests_properties(nibble.test.report_scripts PROPERTIES LABELS cpu)

# gemm_fp4_sm90's repacked layout and register decode, and the stream experiment's layout
# (experiments/gemm_fp4_stream), run on the CPU (the kernels' own decode functions, host build)
# against the exact weights.
nibble_add_gtest(gemm_fp4_sm90_layout SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gemm_fp4_sm90_layout.cpp LIBS nibble_fixtures CUDA::cudart
                 LABELS cpu)

# The GEMM grader's replay guard, timed randomness and call-by-call comparison (harness code, CPU).
nibble_add_gtest(gemm_guard SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gemm_guard.cpp LIBS nibble_runtime LABELS cpu)
