# Fixture tests of the task-free pieces (label cpu): the RNG and thread-count independence,
# safetensors I/O, the manifest. The decode fixture's own tests are in decode/fixtures.cmake, the
# FP4 GEMM fixture's in gemm_fp4/gemm.cmake.
nibble_add_gtest(fixture_rng SOURCES test_fixture_rng.cpp LIBS nibble_fixtures LABELS cpu)
nibble_add_gtest(fixture_safetensors SOURCES test_fixture_safetensors.cpp LIBS nibble_fixtures LABELS cpu)
nibble_add_gtest(fixture_manifest SOURCES test_fixture_manifest.cpp LIBS nibble_fixtures LABELS cpu)
