# tests/emulation: kernels run from their own source on the CPU (emu_core.h and the shim headers,
# which go ahead of the real CUDA and solution headers on these tests' include paths), label cpu:
# the shared small-M GEMM kernel (solutions/common/mma_dequant_gemm.cuh) with the int4 format and
# with gemm_fp4_sm90's NVFP4 / MXFP4 formats; the megakernel's GEMV stage (bulk-copy ring, mbarriers,
# integer mma.sync, warp shuffles), attention stage and grid barriers (every block resident at once),
# publishing to the other block of a cluster (st.async on its mbarrier: the dataflow design's K halves)
# and its weight stream through a page pool on the real schedule, its segment GEMV (K halves summed)
# its attention item and its publish / wait counters,
# the whole megakernel solution through its C ABI on the tiny config, the wgmma GEMM kernel (TMA,
# wgmma, setmaxnreg, split-K clusters) with the int4 and FP4 formats, and the whole int4_gemm_sm90 and
# gemm_fp4_sm90 solutions through their C ABI.

# nibble_emulation_test(<name> SOURCES <test .cpp ...> [CUDA_SOURCES <.cu ...>] [LIBS ...]): a cpu
# test built against the shims; CUDA_SOURCES (a solution's own .cu files) are compiled as C++ here
# (this directory's source properties only: the solution's own build is untouched).
function(nibble_emulation_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;CUDA_SOURCES;LIBS" ${ARGN})
  if(ARG_CUDA_SOURCES)
    set_source_files_properties(${ARG_CUDA_SOURCES} PROPERTIES LANGUAGE CXX COMPILE_OPTIONS "-xc++")
  endif()
  nibble_add_gtest(${name} SOURCES ${ARG_SOURCES} ${ARG_CUDA_SOURCES} LIBS ${ARG_LIBS} LABELS cpu)
  target_include_directories(test_${name} BEFORE PRIVATE ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/shim
                             ${CMAKE_CURRENT_FUNCTION_LIST_DIR} ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel
                             ${PROJECT_SOURCE_DIR}/include)
  target_compile_options(test_${name} PRIVATE -Wno-unknown-pragmas)  # the kernels' #pragma unroll
endfunction()

set(nibble_emu ${CMAKE_CURRENT_LIST_DIR})
set(nibble_mk ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel)
nibble_emulation_test(int4_mma_emulation SOURCES ${nibble_emu}/test_int4_mma_emulation.cpp LIBS nibble_int4_gemm_oracle)
nibble_emulation_test(fp4_mma_emulation SOURCES ${nibble_emu}/test_fp4_mma_emulation.cpp
                      LIBS nibble_gemm_oracle nibble_fixtures)
nibble_emulation_test(megakernel_gemv_emulation SOURCES ${nibble_emu}/test_megakernel_gemv_emulation.cpp LIBS nibble_fixtures)
nibble_emulation_test(megakernel_attention_emulation SOURCES ${nibble_emu}/test_megakernel_attention_emulation.cpp
                      LIBS nibble_fixtures)
nibble_emulation_test(grid_sync_emulation SOURCES ${nibble_emu}/test_grid_sync_emulation.cpp)
nibble_emulation_test(cluster_publish_emulation SOURCES ${nibble_emu}/test_cluster_publish_emulation.cpp)
nibble_emulation_test(dataflow_sync_emulation SOURCES ${nibble_emu}/test_dataflow_sync_emulation.cpp)
nibble_emulation_test(attention_item_emulation SOURCES ${nibble_emu}/test_attention_item_emulation.cpp)
nibble_emulation_test(segment_gemv_emulation SOURCES ${nibble_emu}/test_segment_gemv_emulation.cpp
                      ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel/dataflow_plan.cpp LIBS nibble_fixtures)
nibble_emulation_test(page_stream_emulation SOURCES ${nibble_emu}/test_page_stream_emulation.cpp
                      ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel/dataflow_plan.cpp)
nibble_emulation_test(megakernel_decode_emulation SOURCES ${nibble_emu}/test_megakernel_decode_emulation.cpp
                      ${PROJECT_SOURCE_DIR}/harness/decode/device_model.cpp ${PROJECT_SOURCE_DIR}/harness/device_buffer.cpp
                      ${nibble_mk}/model_host.cpp
                      CUDA_SOURCES ${nibble_mk}/megakernel.cu ${nibble_mk}/decode_kernel.cu ${nibble_mk}/repack.cu
                      LIBS nibble_oracle nibble_fixtures)
# The dataflow megakernel (v2) through its own C ABI, the same test body.
nibble_emulation_test(megakernel_dataflow_decode_emulation SOURCES ${nibble_emu}/test_megakernel_decode_emulation.cpp
                      ${PROJECT_SOURCE_DIR}/harness/decode/device_model.cpp ${PROJECT_SOURCE_DIR}/harness/device_buffer.cpp
                      ${nibble_mk}/model_host.cpp ${nibble_mk}/dataflow_plan.cpp
                      CUDA_SOURCES ${nibble_mk}/dataflow.cu ${nibble_mk}/dataflow_kernel.cu ${nibble_mk}/repack.cu
                      LIBS nibble_oracle nibble_fixtures)
# v2 promises bitwise-equal logits run to run (no fp32 atomics): checked under two warp schedules.
target_compile_definitions(test_megakernel_dataflow_decode_emulation PRIVATE NIBBLE_EMU_EXPECT_BITWISE=1
                           NIBBLE_EMU_DATAFLOW=1)  # and the dataflow kernel's own cases (its bench modes)
# ... and with 8 consumer warps (NIBBLE_DF_WARPS, the other kernel variant; 15 is the default), 8
# producer lanes for every kind (NIBBLE_DF_PRODUCERS; the default 1,gate|up=4,head=8) and the trace on (NIBBLE_DF_TRACE: the test
# checks its rows against the schedule).
add_test(NAME nibble.test.megakernel_dataflow_decode_emulation_8_warps COMMAND test_megakernel_dataflow_decode_emulation
         --gtest_filter=MegakernelDecodeEmulation.*)
set_tests_properties(nibble.test.megakernel_dataflow_decode_emulation_8_warps PROPERTIES LABELS cpu
  ENVIRONMENT "NIBBLE_DF_WARPS=8;NIBBLE_DF_PRODUCERS=8;NIBBLE_DF_TRACE=${CMAKE_CURRENT_BINARY_DIR}/dataflow-trace-8-warps.txt;NIBBLE_SOURCE_DIR=${PROJECT_SOURCE_DIR};NIBBLE_BINARY_DIR=${PROJECT_BINARY_DIR}")
# ... and every case of it with the warps in a random order each pass (emu::schedule_seed), and 30
# producer lanes (4 for gate|up, 1 for the head: the lanes change between segments): the protocol's
# waits must hold under any interleaving, not only the scheduler's round robin.
add_test(NAME nibble.test.megakernel_dataflow_decode_emulation_shuffled COMMAND test_megakernel_dataflow_decode_emulation)
set_tests_properties(nibble.test.megakernel_dataflow_decode_emulation_shuffled PROPERTIES LABELS cpu TIMEOUT 900
  ENVIRONMENT "NIBBLE_EMU_SCHEDULE_SEED=20261205;NIBBLE_DF_PRODUCERS=30,gate|up=4,head=1;NIBBLE_SOURCE_DIR=${PROJECT_SOURCE_DIR};NIBBLE_BINARY_DIR=${PROJECT_BINARY_DIR}")
# v19's paths (the combining block, the K/V rows copied by the attention; v20 made the other two
# the default, NOTES.md), so that both stay checked in CI.
add_test(NAME nibble.test.megakernel_decode_emulation_v19 COMMAND test_megakernel_decode_emulation
         --gtest_filter=MegakernelDecodeEmulation.*)
set_tests_properties(nibble.test.megakernel_decode_emulation_v19 PROPERTIES LABELS cpu
  ENVIRONMENT "NIBBLE_MK_OCOMB=0;NIBBLE_MK_KVPF=0;NIBBLE_SOURCE_DIR=${PROJECT_SOURCE_DIR};NIBBLE_BINARY_DIR=${PROJECT_BINARY_DIR}")
nibble_emulation_test(wgmma_gemm_emulation SOURCES ${nibble_emu}/test_wgmma_gemm_emulation.cpp
                      LIBS nibble_int4_gemm_oracle nibble_gemm_oracle nibble_fixtures)
nibble_emulation_test(int4_gemm_sm90_emulation SOURCES ${nibble_emu}/test_int4_gemm_sm90_emulation.cpp
                      CUDA_SOURCES ${PROJECT_SOURCE_DIR}/solutions/int4_gemm/sm90/int4_gemm_sm90.cu
                      LIBS nibble_int4_gemm_oracle nibble_fixtures)
nibble_emulation_test(gemm_fp4_sm90_emulation SOURCES ${nibble_emu}/test_gemm_fp4_sm90_emulation.cpp
                      CUDA_SOURCES ${PROJECT_SOURCE_DIR}/solutions/gemm_fp4/sm90/gemm_fp4_sm90.cu
                      LIBS nibble_gemm_oracle nibble_fixtures)
