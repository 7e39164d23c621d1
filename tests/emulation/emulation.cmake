# tests/emulation: kernels run from their own source on the CPU (emu_core.h and the shim headers,
# which go ahead of the real CUDA and solution headers on these tests' include paths), label cpu:
# the shared small-M GEMM kernel (solutions/common/mma_dequant_gemm.cuh) with the int4 format and
# with gemm_fp4_sm90's NVFP4 / MXFP4 formats; the megakernel's GEMV stage (bulk-copy ring, mbarriers,
# integer mma.sync, warp shuffles), attention stage and grid barriers (every block resident at once).
nibble_add_gtest(int4_mma_emulation SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_mma_emulation.cpp
                 LIBS nibble_int4_gemm_oracle LABELS cpu)
target_include_directories(test_int4_mma_emulation BEFORE PRIVATE ${CMAKE_CURRENT_LIST_DIR}/shim
                                                                   ${CMAKE_CURRENT_LIST_DIR})
target_compile_options(test_int4_mma_emulation PRIVATE -Wno-unknown-pragmas)  # the kernels' #pragma unroll
nibble_add_gtest(fp4_mma_emulation SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fp4_mma_emulation.cpp
                 LIBS nibble_gemm_oracle nibble_fixtures LABELS cpu)
target_include_directories(test_fp4_mma_emulation BEFORE PRIVATE ${CMAKE_CURRENT_LIST_DIR}/shim
                                                                  ${CMAKE_CURRENT_LIST_DIR})
target_compile_options(test_fp4_mma_emulation PRIVATE -Wno-unknown-pragmas)
nibble_add_gtest(megakernel_gemv_emulation SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_megakernel_gemv_emulation.cpp
                 LIBS nibble_fixtures LABELS cpu)
target_include_directories(test_megakernel_gemv_emulation BEFORE PRIVATE ${CMAKE_CURRENT_LIST_DIR}/shim
                           ${CMAKE_CURRENT_LIST_DIR} ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel)
target_compile_options(test_megakernel_gemv_emulation PRIVATE -Wno-unknown-pragmas)
nibble_add_gtest(megakernel_attention_emulation SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_megakernel_attention_emulation.cpp
                 LIBS nibble_fixtures LABELS cpu)
target_include_directories(test_megakernel_attention_emulation BEFORE PRIVATE ${CMAKE_CURRENT_LIST_DIR}/shim
                           ${CMAKE_CURRENT_LIST_DIR} ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel)
target_compile_options(test_megakernel_attention_emulation PRIVATE -Wno-unknown-pragmas)
nibble_add_gtest(grid_sync_emulation SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_grid_sync_emulation.cpp LABELS cpu)
target_include_directories(test_grid_sync_emulation BEFORE PRIVATE ${CMAKE_CURRENT_LIST_DIR}/shim ${CMAKE_CURRENT_LIST_DIR}
                           ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel)
