# Tests of the bundled solutions (solutions/), included by tests/CMakeLists.txt.

# unfused: the int4 GEMV kernel alone, at shapes that break kernels, against an fp64 CPU product.
nibble_add_gtest(unfused_gemv
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_unfused_gemv.cpp
  LIBS nibble_unfused_kernels CUDA::cudart
  LABELS gpu)
# unfused: attention, rope_kv_append, rmsnorm, embed and swiglu alone against fp64.
nibble_add_gtest(unfused_ops
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_unfused_ops.cpp
  LIBS nibble_unfused_kernels CUDA::cudart
  LABELS gpu)
# unfused: the whole .so through the C ABI on the tiny fixture, against the fp64 oracle.
nibble_add_gtest(unfused_decode_tiny
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_solution_decode_tiny.cpp
  LIBS nibble_runtime nibble_oracle nibble_fixtures
  LABELS gpu)
# The test dlopens ${PROJECT_BINARY_DIR}/lib/libnibble_unfused.so: build it with the test.
add_dependencies(test_unfused_decode_tiny nibble_unfused)
target_compile_definitions(test_unfused_decode_tiny PRIVATE NIBBLE_SOLUTION="unfused")
# One (shared) CUDA runtime per process, as in the grader's children.
set_target_properties(test_unfused_gemv test_unfused_ops test_unfused_decode_tiny PROPERTIES CUDA_RUNTIME_LIBRARY Shared)
