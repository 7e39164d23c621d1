# nibble_solution.cmake: nibble_add_solution(), how every bundled solution (and each task's
# reference) becomes a .so the grader loads, and the per-family lists the GPU tests iterate over.
#
# nibble_add_solution(<target> FAMILY <family> SOURCES <file>... [LIBS <lib>...]
#                     [CUDA_ARCHITECTURES <arch>...] [REFERENCE | SHIM | EXPERIMENT])
#   FAMILY              the task family whose C ABI the .so exports: decode (include/nibble/nibble.h)
#                       or gemm_fp4 (include/nibble/nibble_gemm.h); also the folder name the task
#                       has in solutions/, reference/ and tests/
#   SOURCES             the .so's sources; the entry points come from NIBBLE_DECODE_SOLUTION or
#                       NIBBLE_GEMM_SOLUTION (solutions/common/export.h)
#   LIBS                linked PRIVATE (a static kernel library, CUDA::cublas, ...)
#   CUDA_ARCHITECTURES  built for these alone, whatever CMAKE_CUDA_ARCHITECTURES says (90a for
#                       wgmma, setmaxnreg, cp.async.bulk); the tests skip the .so on another GPU
#   REFERENCE           a task's reference: built the same way, not in the family's list
#   SHIM                a library the grader loads on a solution's behalf (the Python shims,
#                       solutions/python): built the same way, not in the family's list
#   EXPERIMENT          experiments/: an ABI solution kept to be measured again, not shipped: built
#                       the same way, not in the family's list, not installed
# Makes ${PROJECT_BINARY_DIR}/lib/lib<target>.so with the project root and include/ on the include
# path, and, unless REFERENCE, appends <target> to the global property NIBBLE_SOLUTIONS_<family>
# (tests/CMakeLists.txt turns the lists into the tests' table of bundled solutions). Other options
# (-Xptxas -v, link options) are set on the target after the call.

# The task families: every subfolder of solutions/ but common/ and python/ (a new family is found
# without an edit here).
file(GLOB nibble_family_dirs LIST_DIRECTORIES true RELATIVE ${PROJECT_SOURCE_DIR}/solutions ${PROJECT_SOURCE_DIR}/solutions/*)
set(NIBBLE_SOLUTION_FAMILIES "")
foreach(d IN LISTS nibble_family_dirs)
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/solutions/${d} AND NOT d STREQUAL "common" AND NOT d STREQUAL "python")
    list(APPEND NIBBLE_SOLUTION_FAMILIES ${d})
  endif()
endforeach()
list(SORT NIBBLE_SOLUTION_FAMILIES)

function(nibble_add_solution target)
  cmake_parse_arguments(ARG "REFERENCE;SHIM;EXPERIMENT" "FAMILY" "SOURCES;LIBS;CUDA_ARCHITECTURES" ${ARGN})
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "nibble_add_solution(${target}): unknown arguments ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_FAMILY IN_LIST NIBBLE_SOLUTION_FAMILIES)
    message(FATAL_ERROR "nibble_add_solution(${target}): FAMILY '${ARG_FAMILY}' is not one of ${NIBBLE_SOLUTION_FAMILIES}")
  endif()
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "nibble_add_solution(${target}): no SOURCES")
  endif()
  add_library(${target} SHARED ${ARG_SOURCES})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${target} PRIVATE ${ARG_LIBS})
  # -lineinfo: compute-sanitizer and profilers can name source lines; it does not change the code.
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-lineinfo>)
  set_target_properties(${target} PROPERTIES
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/lib
    POSITION_INDEPENDENT_CODE ON
    # One CUDA runtime per process: the harness's (shared) cudart, not a private static copy.
    CUDA_RUNTIME_LIBRARY Shared
    # Only the ABI entry points (NIBBLE_EXPORT) are visible.
    CUDA_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_CUDA_ARCHITECTURES)
    set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${ARG_CUDA_ARCHITECTURES}")
  endif()
  if(NOT ARG_REFERENCE AND NOT ARG_SHIM AND NOT ARG_EXPERIMENT)
    set_property(GLOBAL APPEND PROPERTY NIBBLE_SOLUTIONS_${ARG_FAMILY} ${target})
  endif()
  # Installed beside the grader's lib folder: nibble finds references and shims at <bin>/../lib.
  if(NOT ARG_EXPERIMENT)
    install(TARGETS ${target} LIBRARY DESTINATION ${NIBBLE_INSTALL_LIBDIR})
  endif()
endfunction()
