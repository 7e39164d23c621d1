# gemm-w4a16-int4's CPU tests (issue 24), label cpu: configs, the fp16 codec, the quantiser, the
# pinned fixtures; the fp64 oracle by hand and its variants' separation on the tiny fixtures.
nibble_add_gtest(int4_gemm_fixture SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_gemm_fixture.cpp LIBS nibble_fixtures
                 LABELS cpu)
nibble_add_gtest(int4_gemm_oracle SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_gemm_oracle.cpp
                 LIBS nibble_int4_gemm_oracle LABELS cpu)
