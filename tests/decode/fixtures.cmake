# The decode fixture's tests (label cpu): the int4 quantiser, the pinned SHA-256 of the tiny
# fixture, and an independent numpy re-implementation of the generator (tests/python/check_fixture.py).
nibble_add_gtest(fixture_quantise SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fixture_quantise.cpp LIBS nibble_fixtures
                 LABELS cpu)
nibble_add_gtest(fixture_pinned SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_fixture_pinned.cpp LIBS nibble_fixtures LABELS cpu)
nibble_add_gtest(token_ids SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_token_ids.cpp LIBS nibble_fixtures LABELS cpu)

add_executable(fixture_tool ${CMAKE_CURRENT_LIST_DIR}/fixture_tool.cpp)
target_link_libraries(fixture_tool PRIVATE nibble_fixtures)

# The Python cross-check. Without an interpreter the test still exists and fails with the fix,
# rather than vanishing from the run.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME nibble.test.fixture_python
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/check_fixture.py
                   --tool $<TARGET_FILE:fixture_tool>)
else()
  add_test(NAME nibble.test.fixture_python
           COMMAND ${CMAKE_COMMAND} -E echo "python3 not found: run scripts/setup.sh")
  set_tests_properties(nibble.test.fixture_python PROPERTIES FAIL_REGULAR_EXPRESSION "python3 not found")
endif()
set_tests_properties(nibble.test.fixture_python PROPERTIES LABELS cpu)

# `nibble fixture import`: checkpoints in each format written in numpy from a tiny fixture, imported
# exactly, the KV prefix against a numpy forward pass, calibrate on the import, the refusals.
if(Python3_Interpreter_FOUND)
  add_test(NAME nibble.test.fixture_import
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/check_import.py --nibble $<TARGET_FILE:nibble>)
else()
  add_test(NAME nibble.test.fixture_import COMMAND ${CMAKE_COMMAND} -E echo "python3 not found: run scripts/setup.sh")
  set_tests_properties(nibble.test.fixture_import PROPERTIES FAIL_REGULAR_EXPRESSION "python3 not found")
endif()
set_tests_properties(nibble.test.fixture_import PROPERTIES LABELS cpu)
# On a GPU: the KV prefix by the bundled reference (--path gpu), and the imported fixture graded.
if(Python3_Interpreter_FOUND)
  add_test(NAME nibble.test.fixture_import_gpu
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/python/check_import.py --nibble $<TARGET_FILE:nibble>
                   --gpu --lib ${PROJECT_BINARY_DIR}/lib)
  set_tests_properties(nibble.test.fixture_import_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77)
  nibble_gpu_test_lock(nibble.test.fixture_import_gpu "gpu")
endif()
