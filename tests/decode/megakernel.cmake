# Tests of solutions/decode/megakernel, included by tests/CMakeLists.txt.

# megakernel: the GEMV and attention stages alone at shapes that break them (odd rows, one group,
# partial tiles split between warps, few blocks; chunk edges, 1..4 query heads per KV head) against
# fp64, and the configs the solution declines.
nibble_add_gtest(megakernel_stages
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_megakernel_stages.cpp
  LIBS nibble_megakernel_kernels CUDA::cudart
  LABELS gpu)
# megakernel: the .so's name and the configs it declines, through the C ABI (no GPU needed: the
# config is checked before any CUDA call).
nibble_add_gtest(megakernel_abi
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_megakernel_abi.cpp
  LIBS nibble_runtime
  LABELS cpu)
add_dependencies(test_megakernel_abi nibble_megakernel)
# gemv_plan is host code in megakernel.h (which names CUDA types): its headers, no CUDA library.
target_include_directories(test_megakernel_abi PRIVATE ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel
                                                       ${CUDAToolkit_INCLUDE_DIRS})
# megakernel v2 (issue 21 step 3): the dataflow design's per-CTA schedule (host code): coverage,
# balance, exact waits, no cycle, no buffer rewritten before its reads.
nibble_add_gtest(dataflow_plan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dataflow_plan.cpp ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel/dataflow_plan.cpp
  LABELS cpu)
target_include_directories(test_dataflow_plan PRIVATE ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel)
# megakernel v2's pieces on the GPU: the segment GEMV (page stream, st.async cluster sum) against
# fp64, and the publish / wait counters over many launches (the kernels and checks of their CPU
# emulation, tests/decode/dataflow_cases.cuh).
nibble_add_gtest(dataflow_gpu
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_dataflow_gpu.cu ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel/dataflow_plan.cpp
  LIBS nibble_runtime CUDA::cudart
  LABELS gpu)
target_include_directories(test_dataflow_gpu PRIVATE ${PROJECT_SOURCE_DIR}/solutions/decode/megakernel)
set_target_properties(test_dataflow_gpu PROPERTIES CUDA_ARCHITECTURES 90a CUDA_RUNTIME_LIBRARY Shared)
# Its waits spin on the GPU: a protocol that never completes fails in 2 minutes instead of holding
# the whole test command (it takes seconds when it works).
set_tests_properties(nibble.test.dataflow_gpu PROPERTIES TIMEOUT 120)
# test_megakernel_decode_tiny (decode/solutions.cmake, as for every bundled decode solution) again
# under the A/B switches whose code paths the default run does not take (NOTES.md):
#   group_major  o and down group-major (NIBBLE_MK_CHUNK=1:1): the tiny config's default chunks are
#                all of its groups, so only this run covers the decode kernel's partial input
#                builds ([g0, g1) of build_x_limbs and load_swiglu) and o-proj's wait for a subset
#                of the heads there; with v15's split barrier (NIBBLE_MK_SPLIT=1: no block barrier
#                after the arrival), so that both split modes stay covered
#   o_combine    o-proj merges the attention's chunks itself (the default since v20: no combining
#                block, o waits for every chunk's count of its heads), group-major so that a block
#                merges only a subset of the heads
#   kv_prefetch  each block's first K/V rows copied in the qkv barrier's split phase (the default since
#                v20), alone: with the combining block (NIBBLE_MK_OCOMB=0)
#   v19          v19's paths: the combining block and the K/V rows copied by the attention
#                (NIBBLE_MK_OCOMB=0, NIBBLE_MK_KVPF=0)
#   pfsm         the last 4 blocks only prefetch into L2, the rings unchained (NIBBLE_MK_PFSM=4), on
#                v19's paths and with o_combine group-major (the kernel of both switches is a variant
#                of its own)
foreach(variant "group_major|NIBBLE_MK_CHUNK=1:1;NIBBLE_MK_SPLIT=1"
                "o_combine|NIBBLE_MK_OCOMB=1;NIBBLE_MK_CHUNK=1:1"
                "kv_prefetch|NIBBLE_MK_OCOMB=0"
                "v19|NIBBLE_MK_OCOMB=0;NIBBLE_MK_KVPF=0"
                "pfsm|NIBBLE_MK_PFSM=4;NIBBLE_MK_OCOMB=0;NIBBLE_MK_KVPF=0"
                "pfsm_o_combine|NIBBLE_MK_PFSM=4;NIBBLE_MK_OCOMB=1;NIBBLE_MK_CHUNK=1:1")
  string(FIND "${variant}" "|" bar)
  string(SUBSTRING "${variant}" 0 ${bar} name)
  math(EXPR bar "${bar} + 1")
  string(SUBSTRING "${variant}" ${bar} -1 env)
  add_test(NAME nibble.test.megakernel_decode_tiny_${name} COMMAND test_megakernel_decode_tiny)
  set_tests_properties(nibble.test.megakernel_decode_tiny_${name} PROPERTIES
    LABELS "gpu"
    SKIP_RETURN_CODE ${NIBBLE_TEST_SKIP_CODE}
    ENVIRONMENT "${env};NIBBLE_SOURCE_DIR=${PROJECT_SOURCE_DIR};NIBBLE_BINARY_DIR=${PROJECT_BINARY_DIR}")
  nibble_gpu_test_lock(nibble.test.megakernel_decode_tiny_${name} "gpu")
endforeach()
set_target_properties(test_megakernel_stages test_megakernel_abi PROPERTIES
  CUDA_RUNTIME_LIBRARY Shared)
