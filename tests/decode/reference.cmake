# Tests of reference/: the fp64 oracle's pieces (hand-worked values), the oracle on a tiny
# fixture, and the fp32 cuBLAS reference against the oracle on the GPU.
nibble_add_gtest(oracle SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_oracle.cpp LIBS nibble_oracle LABELS cpu)
nibble_add_gtest(oracle_fixture SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_oracle_fixture.cpp LIBS nibble_oracle nibble_fixtures LABELS cpu)

if(TARGET nibble_runtime AND TARGET nibble_reference)
  nibble_add_gtest(reference_gpu SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_reference_gpu.cpp
                   LIBS nibble_runtime nibble_oracle nibble_fixtures CUDA::cudart LABELS gpu)
  # The test dlopens the .so: build it first, and tell the test where it is.
  add_dependencies(test_reference_gpu nibble_reference)
  target_compile_definitions(test_reference_gpu PRIVATE
                             NIBBLE_REFERENCE_SO="$<TARGET_FILE:nibble_reference>")
else()
  message(WARNING "nibble_runtime or nibble_reference is not defined: test_reference_gpu is not built")
endif()
# The drop-the-feature / precision variants (reference/decode/variants.h): table, pieces by hand, and the
# oracle with each variant on a tiny fixture against the gate.
nibble_add_gtest(variants SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_variants.cpp LIBS nibble_oracle nibble_fixtures LABELS cpu)
