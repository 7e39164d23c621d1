# tests/emulation: kernels run from their own source on the CPU (emu_core.h and the shim headers,
# which go ahead of the real CUDA and solution headers on these tests' include paths), label cpu:
# the shared small-M GEMM kernel (solutions/common/mma_dequant_gemm.cuh) with the int4 format and
# with gemm_fp4_sm90's NVFP4 / MXFP4 formats; the megakernel's GEMV stage (bulk-copy ring, mbarriers,
# integer mma.sync, warp shuffles), attention stage and grid barriers (every block resident at once),
# the whole megakernel solution through its C ABI on the tiny config, the wgmma GEMM kernel (TMA,
# wgmma, setmaxnreg, split-K clusters) with the int4 and FP4 formats, and the whole int4_gemm_sm90 and
# gemm_fp4_sm90 solutions through their C ABI.
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
# The whole megakernel solution: its three .cu files compiled here as C++ against the shims (this
# directory's source properties only: the solution's own build is untouched).
set(nibble_mk_sources ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel/megakernel.cu
                      ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel/decode_kernel.cu
                      ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel/repack.cu)
set_source_files_properties(${nibble_mk_sources} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-xc++")
nibble_add_gtest(megakernel_decode_emulation SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_megakernel_decode_emulation.cpp
                 ${nibble_mk_sources} ${PROJECT_SOURCE_DIR}/harness/decode/device_model.cpp
                 ${PROJECT_SOURCE_DIR}/harness/device_buffer.cpp LIBS nibble_oracle nibble_fixtures LABELS cpu)
target_include_directories(test_megakernel_decode_emulation BEFORE PRIVATE ${CMAKE_CURRENT_LIST_DIR}/shim
                           ${CMAKE_CURRENT_LIST_DIR} ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel
                           ${PROJECT_SOURCE_DIR}/include)
target_compile_options(test_megakernel_decode_emulation PRIVATE -Wno-unknown-pragmas)
# The two candidates measured faster on 2026-12-02 (NOTES.md), together: their code paths checked in CI.
add_test(NAME nibble.test.megakernel_decode_emulation_o_combine_kv_prefetch COMMAND test_megakernel_decode_emulation)
set_tests_properties(nibble.test.megakernel_decode_emulation_o_combine_kv_prefetch PROPERTIES LABELS cpu
  ENVIRONMENT "NIBBLE_MK_OCOMB=1;NIBBLE_MK_KVPF=1;NIBBLE_SOURCE_DIR=${PROJECT_SOURCE_DIR};NIBBLE_BINARY_DIR=${PROJECT_BINARY_DIR}")
nibble_add_gtest(wgmma_gemm_emulation SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_wgmma_gemm_emulation.cpp
                 LIBS nibble_int4_gemm_oracle nibble_gemm_oracle nibble_fixtures LABELS cpu)
target_include_directories(test_wgmma_gemm_emulation BEFORE PRIVATE ${CMAKE_CURRENT_LIST_DIR}/shim ${CMAKE_CURRENT_LIST_DIR})
target_compile_options(test_wgmma_gemm_emulation PRIVATE -Wno-unknown-pragmas)
# The tuned int4 solution whole, its .cu compiled here as C++ against the shims.
set(nibble_int4_sm90_source ${PROJECT_SOURCE_DIR}/solutions/int4_gemm/sm90/int4_gemm_sm90.cu)
set_source_files_properties(${nibble_int4_sm90_source} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-xc++")
nibble_add_gtest(int4_gemm_sm90_emulation SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_gemm_sm90_emulation.cpp
                 ${nibble_int4_sm90_source} LIBS nibble_int4_gemm_oracle nibble_fixtures LABELS cpu)
target_include_directories(test_int4_gemm_sm90_emulation BEFORE PRIVATE ${CMAKE_CURRENT_LIST_DIR}/shim
                           ${CMAKE_CURRENT_LIST_DIR} ${PROJECT_SOURCE_DIR}/include)
target_compile_options(test_int4_gemm_sm90_emulation PRIVATE -Wno-unknown-pragmas)
# The tuned FP4 solution whole, its .cu compiled here as C++ against the shims.
set(nibble_fp4_sm90_source ${PROJECT_SOURCE_DIR}/solutions/gemm_fp4/sm90/gemm_fp4_sm90.cu)
set_source_files_properties(${nibble_fp4_sm90_source} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-xc++")
nibble_add_gtest(gemm_fp4_sm90_emulation SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gemm_fp4_sm90_emulation.cpp
                 ${nibble_fp4_sm90_source} LIBS nibble_gemm_oracle nibble_fixtures LABELS cpu)
target_include_directories(test_gemm_fp4_sm90_emulation BEFORE PRIVATE ${CMAKE_CURRENT_LIST_DIR}/shim
                           ${CMAKE_CURRENT_LIST_DIR} ${PROJECT_SOURCE_DIR}/include)
target_compile_options(test_gemm_fp4_sm90_emulation PRIVATE -Wno-unknown-pragmas)
