# GPU tests of the FP4 GEMM .so's (issue 7) through their C ABI against the fp64 oracle: the fp32
# cuBLAS reference (and each of its variants), every bundled solution of the family at the gate
# (NIBBLE_SOLUTIONS_gemm_fp4, bundled_solutions.h), and the baseline, the cuBLAS bf16 comparison
# point and the tuned sm_90a solution each at its own tolerance.
if(TARGET nibble_gemm_reference AND TARGET nibble_gemm_oracle)
  nibble_add_gtest(gemm_solutions_gpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gemm_solutions_gpu.cpp
                   LIBS nibble_gemm_oracle nibble_runtime nibble_fixtures CUDA::cudart ${CMAKE_DL_LIBS} LABELS gpu)
  # The test dlopens the .so's: build them first, and tell the test where the reference is.
  add_dependencies(test_gemm_solutions_gpu nibble_gemm_reference nibble_gemm_fp4_stream)  # and the stream experiment
  nibble_test_needs_solutions(test_gemm_solutions_gpu gemm_fp4)
  target_compile_definitions(test_gemm_solutions_gpu PRIVATE
    NIBBLE_GEMM_REFERENCE_SO="$<TARGET_FILE:nibble_gemm_reference>")
else()
  message(WARNING "nibble_gemm_reference or nibble_gemm_oracle is not defined: test_gemm_solutions_gpu is not built")
endif()
