# The hostile-solutions suite (issue 4, item 6), generated from one list: tests/hostile/expectations.json.
# Every row becomes ${PROJECT_BINARY_DIR}/tests/lib/libhostile_<name>.so:
#   source "c"   tests/hostile/hostile_c.c, plain C, no CUDA (the load-time and crash cases)
#   source "cu"  tests/hostile/hostile.cu on top of the unfused solution, compiled once more below
# with HOSTILE_<NAME> selecting the behaviour. Tests: nibble.test.hostile_cpu (CI: loading, the list,
# the README), nibble.test.hostile_gpu (whole grades; gpu, slow), nibble.test.hostile_readme, and the
# fuzz target of the fixture readers (tests/fuzz/fuzz.cmake).
set(NIBBLE_HOSTILE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/hostile)
set(NIBBLE_UNFUSED_DIR ${PROJECT_SOURCE_DIR}/solutions/decode/unfused)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${NIBBLE_HOSTILE_DIR}/expectations.json)
file(READ ${NIBBLE_HOSTILE_DIR}/expectations.json nibble_hostile_json)
string(JSON nibble_hostile_n LENGTH "${nibble_hostile_json}" rows)

# The unfused solution's ABI layer, its exports renamed so hostile.cu can wrap them, and its SwiGLU
# launcher renamed so hostile.cu decides how that kernel is launched (runtime or driver API).
add_library(hostile_unfused_core OBJECT ${NIBBLE_UNFUSED_DIR}/unfused.cu)
target_include_directories(hostile_unfused_core PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
target_link_libraries(hostile_unfused_core PUBLIC nibble_unfused_kernels)
target_compile_definitions(hostile_unfused_core PRIVATE
  nibble_abi_version=unfused_abi_version
  nibble_solution_name=unfused_solution_name
  nibble_decode_build_model=unfused_decode_build_model
  nibble_decode_step=unfused_decode_step
  nibble_decode_teardown=unfused_decode_teardown
  launch_swiglu=hostile_launch_swiglu)
set_target_properties(hostile_unfused_core PROPERTIES
  POSITION_INDEPENDENT_CODE ON CUDA_RUNTIME_LIBRARY Shared
  CUDA_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)

# solutions/decode/unfused/swiglu.cu as a fatbin for the project's architectures, embedded in a header:
# the driver-API variant loads it with cuModuleLoadData at run time.
set(nibble_hostile_gen ${CMAKE_CURRENT_BINARY_DIR}/hostile_gen)
set(nibble_hostile_gencode)
foreach(arch IN LISTS CMAKE_CUDA_ARCHITECTURES)
  if(arch MATCHES "^([0-9]+[af]?)(-real|-virtual)?$")
    set(a ${CMAKE_MATCH_1})
    list(APPEND nibble_hostile_gencode "-gencode=arch=compute_${a},code=[sm_${a},compute_${a}]")
  else()
    list(APPEND nibble_hostile_gencode "-arch=${arch}")  # all, all-major, native
  endif()
endforeach()
add_custom_command(
  OUTPUT ${nibble_hostile_gen}/hostile_swiglu_fatbin.h
  COMMAND ${CMAKE_COMMAND} -E make_directory ${nibble_hostile_gen}
  COMMAND ${CMAKE_CUDA_COMPILER} -fatbin -std=c++17 ${nibble_hostile_gencode} -I${NIBBLE_UNFUSED_DIR}
          ${NIBBLE_UNFUSED_DIR}/swiglu.cu -o ${nibble_hostile_gen}/swiglu.fatbin
  COMMAND ${CMAKE_COMMAND} -DIN=${nibble_hostile_gen}/swiglu.fatbin -DOUT=${nibble_hostile_gen}/hostile_swiglu_fatbin.h
          -DNAME=hostile_swiglu_fatbin -P ${NIBBLE_HOSTILE_DIR}/embed_fatbin.cmake
  DEPENDS ${NIBBLE_UNFUSED_DIR}/swiglu.cu ${NIBBLE_UNFUSED_DIR}/kernels.h ${NIBBLE_HOSTILE_DIR}/embed_fatbin.cmake
  COMMENT "hostile: swiglu.cu -> fatbin -> embedded header"
  VERBATIM)

set(NIBBLE_HOSTILE_SOLUTIONS)
math(EXPR nibble_hostile_last "${nibble_hostile_n} - 1")
foreach(i RANGE ${nibble_hostile_last})
  string(JSON name GET "${nibble_hostile_json}" rows ${i} name)
  string(JSON source GET "${nibble_hostile_json}" rows ${i} source)
  string(TOUPPER ${name} NAME)
  set(target hostile_${name})
  if(source STREQUAL "c")
    add_library(${target} SHARED ${NIBBLE_HOSTILE_DIR}/hostile_c.c)
    set_target_properties(${target} PROPERTIES C_STANDARD 99)
  elseif(source STREQUAL "cu")
    add_library(${target} SHARED ${NIBBLE_HOSTILE_DIR}/hostile.cu)
    target_link_libraries(${target} PRIVATE hostile_unfused_core nibble_unfused_kernels)
    if(name MATCHES "^(whole_hide_in_(tail|sibling)_launch|device_launch_by_nodes)$")  # a kernel that launches a graph from the GPU
      # (relocatable device code; CMake's device link adds cudadevrt)
      set_target_properties(${target} PROPERTIES CUDA_SEPARABLE_COMPILATION ON CUDA_RESOLVE_DEVICE_SYMBOLS ON)
    endif()
    if(name STREQUAL "driver_api")
      target_sources(${target} PRIVATE ${nibble_hostile_gen}/hostile_swiglu_fatbin.h)
      target_include_directories(${target} PRIVATE ${nibble_hostile_gen})
    endif()
    set_target_properties(${target} PROPERTIES CUDA_RUNTIME_LIBRARY Shared
      CUDA_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  else()
    message(FATAL_ERROR "tests/hostile/expectations.json row ${name}: source '${source}' is neither c nor cu")
  endif()
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(${target} PRIVATE HOSTILE_${NAME} HOSTILE_NAME="hostile-${name}")
  set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/tests/lib)
  list(APPEND NIBBLE_HOSTILE_SOLUTIONS ${target})
endforeach()
add_custom_target(hostile_solutions DEPENDS ${NIBBLE_HOSTILE_SOLUTIONS})
# test_grade_gpu grades the honest `graph` row with each --graph-records mode.
add_dependencies(test_grade_gpu hostile_graph)

nibble_add_gtest(hostile_cpu SOURCES test_hostile_cpu.cpp LIBS nibble_runtime LABELS cpu)
add_dependencies(test_hostile_cpu hostile_solutions)
nibble_add_gtest(hostile_gpu SOURCES test_hostile_gpu.cpp LIBS nibble_runtime LABELS "gpu;slow")
add_dependencies(test_hostile_gpu hostile_solutions nibble nibble_reference)
# ~27 whole grades, one of them 40 s of host sleeps and one a 10 s watchdog.
set_tests_properties(nibble.test.hostile_gpu PROPERTIES TIMEOUT 1800)

# The README's table is generated from the same list; CI fails when it is stale.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME nibble.test.hostile_readme COMMAND ${Python3_EXECUTABLE} ${NIBBLE_HOSTILE_DIR}/make_readme.py --check)
else()
  add_test(NAME nibble.test.hostile_readme COMMAND ${CMAKE_COMMAND} -E echo "python3 not found: run scripts/setup.sh")
  set_tests_properties(nibble.test.hostile_readme PROPERTIES FAIL_REGULAR_EXPRESSION "python3 not found")
endif()
set_tests_properties(nibble.test.hostile_readme PROPERTIES LABELS cpu)

include(${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz.cmake)
