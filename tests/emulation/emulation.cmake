# tests/emulation: kernels run from their own source on the CPU (emu_core.h and the shim headers,
# which go ahead of the real CUDA and solution headers on these tests' include paths), label cpu.
nibble_add_gtest(int4_mma_emulation SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_int4_mma_emulation.cpp
                 LIBS nibble_int4_gemm_oracle LABELS cpu)
target_include_directories(test_int4_mma_emulation BEFORE PRIVATE ${CMAKE_CURRENT_LIST_DIR}/shim
                                                                   ${CMAKE_CURRENT_LIST_DIR})
target_compile_options(test_int4_mma_emulation PRIVATE -Wno-unknown-pragmas)  # the kernels' #pragma unroll
