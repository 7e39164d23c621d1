# Fixture tests of the task-free pieces (label cpu): the RNG and thread-count independence,
# safetensors I/O, the manifest. The decode fixture's own tests are in decode/fixtures.cmake, the
# FP4 GEMM fixture's in gemm_fp4/gemm.cmake.
nibble_add_gtest(fixture_rng SOURCES test_fixture_rng.cpp LIBS nibble_fixtures LABELS cpu)
nibble_add_gtest(fixture_safetensors SOURCES test_fixture_safetensors.cpp LIBS nibble_fixtures LABELS cpu)
nibble_add_gtest(fixture_manifest SOURCES test_fixture_manifest.cpp LIBS nibble_fixtures LABELS cpu)

# The int4 checkpoint layouts (fixtures/int4_formats.h): hand-worked words and round trips, then
# an independent numpy packer over the C++ one's output, then the formats' own Python packages
# (compressed-tensors, AutoAWQ) where they import: that entry is skipped, with the reasons, when none does.
nibble_add_gtest(int4_formats SOURCES test_int4_formats.cpp LIBS nibble_fixtures LABELS cpu)
add_executable(int4_formats_tool int4_formats_tool.cpp)
target_link_libraries(int4_formats_tool PRIVATE nibble_fixtures)
find_package(Python3 COMPONENTS Interpreter)
foreach(check numpy packages)
  set(name nibble.test.int4_formats_${check})
  set(extra "")
  if(check STREQUAL "packages")
    set(extra --packages)
  endif()
  if(Python3_Interpreter_FOUND)
    add_test(NAME ${name} COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/check_int4_formats.py
                                  --tool $<TARGET_FILE:int4_formats_tool> ${extra})
  else()
    add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -E echo "python3 not found: run scripts/setup.sh")
    set_tests_properties(${name} PROPERTIES FAIL_REGULAR_EXPRESSION "python3 not found")
  endif()
  set_tests_properties(${name} PROPERTIES LABELS cpu SKIP_RETURN_CODE ${NIBBLE_TEST_SKIP_CODE})
endforeach()
