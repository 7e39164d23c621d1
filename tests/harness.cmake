# Tests of the harness: statistics, processes, solution loading, the CLI, and (gpu) whole grades.

# Deliberately broken solutions (tests/solutions/bad_solutions.c), one .so per defect.
foreach(bad abi_version missing_teardown segfault hang nothing not_supported load_segfault load_abort teardown_fails teardown_segfault)
  string(TOUPPER ${bad} BAD)
  add_library(bad_${bad} SHARED ${CMAKE_CURRENT_SOURCE_DIR}/solutions/bad_solutions.c)
  target_include_directories(bad_${bad} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(bad_${bad} PRIVATE BAD_${BAD} BAD_NAME="bad-${bad}")
  set_target_properties(bad_${bad} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests/lib C_STANDARD 99)
  list(APPEND NIBBLE_BAD_SOLUTIONS bad_${bad})
endforeach()

# GEMM libraries that ask for an int4 layout (tests/solutions/gemm_int4_layouts.c): AWQ (1), and 9 (none).
foreach(layout 1 9)
  add_library(gemm_int4_layout_${layout} SHARED ${CMAKE_CURRENT_SOURCE_DIR}/solutions/gemm_int4_layouts.c)
  target_include_directories(gemm_int4_layout_${layout} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(gemm_int4_layout_${layout} PRIVATE INT4_LAYOUT=${layout})
  set_target_properties(gemm_int4_layout_${layout} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests/lib C_STANDARD 99)
  list(APPEND NIBBLE_BAD_SOLUTIONS gemm_int4_layout_${layout})
endforeach()

nibble_add_gtest(stats SOURCES test_stats.cpp LIBS nibble_runtime LABELS cpu)
nibble_add_gtest(process SOURCES test_process.cpp LIBS nibble_runtime LABELS cpu)
nibble_add_gtest(solution_library SOURCES test_solution_library.cpp LIBS nibble_runtime LABELS cpu)
add_dependencies(test_solution_library ${NIBBLE_BAD_SOLUTIONS})
# solutions/common/export.h, the entry points every bundled solution exports, on the CPU.
nibble_add_gtest(solution_export SOURCES test_solution_export.cpp LIBS CUDA::cudart LABELS cpu)
target_include_directories(test_solution_export PRIVATE ${PROJECT_SOURCE_DIR}/include)
nibble_add_gtest(cli SOURCES test_cli.cpp LIBS nibble_runtime LABELS cpu)
target_compile_definitions(test_cli PRIVATE NIBBLE_TEST_VERSION="${PROJECT_VERSION}")  # what --version must say
# The Python shims (solutions/python) in forked processes: DLPack mapping, module loading, each bug
# kind's error record (tests/python/shim_probe.py). Skips with the reason in a build without them.
nibble_add_gtest(python_shim SOURCES test_python_shim.cpp LIBS nibble_runtime LABELS cpu)
foreach(shim nibble_python_decode nibble_python_gemm)
  if(TARGET ${shim})
    add_dependencies(test_python_shim ${shim})
    add_dependencies(test_cli ${shim})
  endif()
endforeach()
nibble_add_gtest(provenance SOURCES test_provenance.cpp LIBS nibble_runtime LABELS cpu)
add_dependencies(test_cli nibble ${NIBBLE_BAD_SOLUTIONS})
nibble_add_gtest(grade_gpu SOURCES test_grade_gpu.cpp LIBS nibble_tasks nibble_runtime LABELS "gpu;slow")
add_dependencies(test_grade_gpu nibble nibble_reference nibble_gemm_reference ${NIBBLE_BAD_SOLUTIONS})
# It grades every bundled solution of both families (bundled_solutions.h).
nibble_test_needs_solutions(test_grade_gpu ${NIBBLE_SOLUTION_FAMILIES})
nibble_add_gtest(calibrate_cpu SOURCES test_calibrate_cpu.cpp LIBS nibble_tasks nibble_runtime LABELS cpu)
add_dependencies(test_calibrate_cpu nibble)
# The verdict rules for every task of the registry, the parent-child protocol, the one comparison.
nibble_add_gtest(verdict SOURCES test_verdict.cpp LIBS nibble_tasks LABELS cpu)
nibble_add_gtest(protocol SOURCES test_protocol.cpp LIBS nibble_tasks LABELS cpu)
add_dependencies(test_protocol nibble)
# The call ledger (the parent's clock and picks) over its real pipes, client and parent in one process.
nibble_add_gtest(ledger SOURCES test_ledger.cpp LIBS nibble_runtime LABELS cpu)
# The harness kernels the host recomputes (the digest's checksum, the GEMM guard's staged A).
nibble_add_gtest(gpu_checks_gpu SOURCES test_gpu_checks_gpu.cpp LIBS nibble_tasks nibble_runtime LABELS gpu)

# GEMM cheats (tests/solutions/gemm_hostile.cu, one .so per behaviour) on the baseline, its exports
# renamed. GradeGemmGpu.ReplayingTheFirstCallFails and .WorkBetweenTimedCallsIsInvalidTiming grade them.
# nibble_renamed_core(<target> <source> <prefix> [definitions...]): the bundled solution <source> as an
# object library whose GEMM ABI exports are renamed <prefix>_* (nibble_gemm_prepare ->
# <prefix>_prepare, ...), so that a cheat can wrap it and export the ABI itself.
function(nibble_renamed_core target source prefix)
  add_library(${target} OBJECT ${source})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(${target} PRIVATE ${ARGN}
    nibble_abi_version=${prefix}_abi_version
    nibble_gemm_abi_version=${prefix}_gemm_abi_version
    nibble_solution_name=${prefix}_solution_name
    nibble_gemm_int4_layout=${prefix}_int4_layout
    nibble_gemm_prepare=${prefix}_prepare
    nibble_gemm_run=${prefix}_run
    nibble_gemm_teardown=${prefix}_teardown)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON CUDA_RUNTIME_LIBRARY Shared
    CUDA_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
endfunction()
if(TARGET nibble_gemm_baseline)
  nibble_renamed_core(hostile_gemm_baseline_core ${PROJECT_SOURCE_DIR}/solutions/gemm_fp4/baseline/gemm_baseline.cu
                      gemm_baseline)
  # gemm-w4a16-int4's plain-layout baseline.
  nibble_renamed_core(hostile_int4_baseline_core ${PROJECT_SOURCE_DIR}/solutions/int4_gemm/baseline/int4_gemm_baseline.cu
                      int4_baseline NIBBLE_INT4_BASELINE_LAYOUT=0 NIBBLE_INT4_BASELINE_NAME="int4-gemm-baseline-plain")
  foreach(behaviour replay gap_work)
    string(TOUPPER ${behaviour} BEHAVIOUR)
    set(t hostile_gemm_${behaviour})
    add_library(${t} SHARED ${CMAKE_CURRENT_SOURCE_DIR}/solutions/gemm_hostile.cu)
    target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
    target_compile_definitions(${t} PRIVATE HOSTILE_GEMM_${BEHAVIOUR} HOSTILE_NAME="hostile-gemm-${behaviour}")
    target_link_libraries(${t} PRIVATE hostile_gemm_baseline_core hostile_int4_baseline_core Threads::Threads)
    set_target_properties(${t} PROPERTIES POSITION_INDEPENDENT_CODE ON CUDA_RUNTIME_LIBRARY Shared
      CUDA_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON
      LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests/lib)
    add_dependencies(test_grade_gpu ${t})
  endforeach()
endif()

# Every bundled Python solution (solutions/<family>/python/*.py) graded on tiny for its family's tasks.
nibble_add_gtest(python_solutions_gpu SOURCES test_python_solutions_gpu.cpp LIBS nibble_tasks nibble_runtime LABELS "gpu;slow")
target_compile_definitions(test_python_solutions_gpu PRIVATE NIBBLE_TEST_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
add_dependencies(test_python_solutions_gpu nibble)

# The child's sandbox (harness/sandbox.h): each layer tried in a forked process, then `nibble __child`.
nibble_add_gtest(sandbox SOURCES test_sandbox.cpp LIBS nibble_runtime LABELS cpu)
add_dependencies(test_sandbox nibble)

# The `nibble` Python module (python/nibble, what `pip install .` installs beside the command) run
# against the built command: reports, fixtures' tensors against the manifest's hashes, grade().
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME nibble.test.python_module
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/python/check_nibble_module.py --nibble $<TARGET_FILE:nibble>)
else()
  add_test(NAME nibble.test.python_module COMMAND ${CMAKE_COMMAND} -E echo "python3 not found: run scripts/setup.sh")
  set_tests_properties(nibble.test.python_module PROPERTIES FAIL_REGULAR_EXPRESSION "python3 not found")
endif()
set_tests_properties(nibble.test.python_module PROPERTIES LABELS cpu)

# nibble batch --slurm on a real one-node Slurm cluster the test starts (tests/slurm/slurm_cluster.sh):
# skipped, with the reason, only where slurm-wlm and munge are not installed.
add_test(NAME nibble.test.slurm_cluster COMMAND bash ${PROJECT_SOURCE_DIR}/tests/slurm/slurm_cluster.sh $<TARGET_FILE:nibble>)
set_tests_properties(nibble.test.slurm_cluster PROPERTIES LABELS cpu SKIP_RETURN_CODE 77 TIMEOUT 400 RESOURCE_LOCK slurm)
