# The fuzz target of the fixture readers (issue 4, item 7), included by tests/hostile.cmake.
#
#   nibble.test.fuzz_corpus   (cpu) replays tests/fuzz/corpus through LLVMFuzzerTestOneInput,
#                             built with the project's compiler and no libFuzzer
#   fuzz_safetensors          the libFuzzer binary, built in-tree only when the project's C++
#                             compiler is clang and links -fsanitize=fuzzer
#   fuzz_safetensors_clang    (custom target, not in ALL) configures and builds tests/fuzz as its own
#                             project with clang++ when the project itself is built with g++:
#                             cmake --build <build> --target fuzz_safetensors_clang
#                             <build>/fuzz/fuzz_safetensors -max_total_time=300 <build>/fuzz/work tests/fuzz/corpus
set(NIBBLE_FUZZ_DIR ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)

add_executable(fuzz_safetensors_replay ${NIBBLE_FUZZ_DIR}/fuzz_safetensors.cpp ${NIBBLE_FUZZ_DIR}/fuzz_replay_main.cpp)
target_link_libraries(fuzz_safetensors_replay PRIVATE nibble_fixtures)
add_test(NAME nibble.test.fuzz_corpus COMMAND fuzz_safetensors_replay ${NIBBLE_FUZZ_DIR}/corpus)
set_tests_properties(nibble.test.fuzz_corpus PROPERTIES LABELS cpu)

include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer,address")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=fuzzer,address")
check_cxx_source_compiles([=[
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }
]=] NIBBLE_CXX_HAS_LIBFUZZER)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)

if(NIBBLE_CXX_HAS_LIBFUZZER)
  # The readers are linked from nibble_fixtures as built (uninstrumented): the in-tree target checks
  # for crashes; the standalone project (tests/fuzz/CMakeLists.txt) also instruments the readers.
  add_executable(fuzz_safetensors ${NIBBLE_FUZZ_DIR}/fuzz_safetensors.cpp)
  target_compile_options(fuzz_safetensors PRIVATE -fsanitize=fuzzer,address)
  target_link_options(fuzz_safetensors PRIVATE -fsanitize=fuzzer,address)
  target_link_libraries(fuzz_safetensors PRIVATE nibble_fixtures)
else()
  find_program(NIBBLE_FUZZ_CLANGXX NAMES clang++ clang++-18 clang++-17 clang++-16 clang++-15 clang++-14)
  if(NIBBLE_FUZZ_CLANGXX)
    add_custom_target(fuzz_safetensors_clang
      COMMAND ${CMAKE_COMMAND} -S ${NIBBLE_FUZZ_DIR} -B ${PROJECT_BINARY_DIR}/fuzz -DCMAKE_CXX_COMPILER=${NIBBLE_FUZZ_CLANGXX}
      COMMAND ${CMAKE_COMMAND} --build ${PROJECT_BINARY_DIR}/fuzz
      COMMENT "building the libFuzzer target with ${NIBBLE_FUZZ_CLANGXX} in ${PROJECT_BINARY_DIR}/fuzz"
      VERBATIM)
  endif()
endif()
