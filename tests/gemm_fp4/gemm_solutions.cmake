# GPU tests of the FP4 GEMM .so's (issue 7): the fp32 cuBLAS reference (and each of its variants),
# the baseline, the cuBLAS bf16 comparison point and the tuned sm_90a solution, through their C ABI,
# against the fp64 oracle.
if(TARGET nibble_gemm_reference AND TARGET nibble_gemm_baseline AND TARGET nibble_gemm_cublas_bf16
   AND TARGET nibble_gemm_fp4_sm90 AND TARGET nibble_gemm_oracle)
  nibble_add_gtest(gemm_solutions_gpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gemm_solutions_gpu.cpp
                   LIBS nibble_gemm_oracle nibble_fixtures CUDA::cudart ${CMAKE_DL_LIBS} LABELS gpu)
  # The test dlopens the .so's: build them first, and tell the test where they are.
  add_dependencies(test_gemm_solutions_gpu nibble_gemm_reference nibble_gemm_baseline nibble_gemm_cublas_bf16
                   nibble_gemm_fp4_sm90)
  target_compile_definitions(test_gemm_solutions_gpu PRIVATE
    NIBBLE_GEMM_REFERENCE_SO="$<TARGET_FILE:nibble_gemm_reference>"
    NIBBLE_GEMM_BASELINE_SO="$<TARGET_FILE:nibble_gemm_baseline>"
    NIBBLE_GEMM_CUBLAS_BF16_SO="$<TARGET_FILE:nibble_gemm_cublas_bf16>"
    NIBBLE_GEMM_FP4_SM90_SO="$<TARGET_FILE:nibble_gemm_fp4_sm90>")
else()
  message(WARNING "a GEMM solution target is not defined: test_gemm_solutions_gpu is not built")
endif()
