# gemm-w4a16-int4's CPU tests (issue 24), label cpu: configs, the fp16 codec, the quantiser, the
# pinned fixtures; the fp64 oracle by hand and its variants' separation on the tiny fixtures.
nibble_add_gtest(int4_gemm_fixture SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_gemm_fixture.cpp LIBS nibble_fixtures
                 LABELS cpu)
nibble_add_gtest(int4_gemm_oracle SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_gemm_oracle.cpp
                 LIBS nibble_int4_gemm_oracle LABELS cpu)
# The weights as each layout hands them over: tensor list, round trip, g_idx by hand, and an
# independent reader whose layout mistakes are the oracle's variants.
nibble_add_gtest(int4_gemm_layouts SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_gemm_layouts.cpp
                 LIBS nibble_int4_gemm_oracle LABELS cpu)
# GPU: every layout's baseline, the cuBLAS bf16 point and the reference graded in one run on tiny-sym
# and a residue shape.
nibble_add_gtest(int4_gemm_gpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_gemm_gpu.cpp LIBS nibble_runtime
                 LABELS "gpu;slow")
add_dependencies(test_int4_gemm_gpu nibble)
nibble_test_needs_solutions(test_int4_gemm_gpu int4_gemm)
# The solutions' layout reader (int4_layouts.cuh) on the host against the oracle: no GPU needed.
nibble_add_gtest(int4_layouts_decode SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_layouts_decode.cu
                 LIBS nibble_int4_gemm_oracle CUDA::cudart LABELS cpu)
# The small-M tensor-core solution's repacked layout, decoded on the host as its kernel does.
nibble_add_gtest(int4_mma_layout SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_mma_layout.cpp LIBS nibble_int4_gemm_oracle
                 LABELS cpu)
# The tuned sm_90a solution's wgmma layout (records, the bf16 decode), decoded on the host as its kernel does.
nibble_add_gtest(int4_sm90_layout SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_sm90_layout.cpp LIBS nibble_int4_gemm_oracle
                 LABELS cpu)
