# Kernel tests built once per x86 instruction set.
#
# The CPU prelude picks its vector width (8 lanes for AVX2, 16 for AVX-512)
# from the target, and a compiler may vectorise two instantiations of one
# kernel differently on one ISA and alike on another. A test binary built
# with -march=native would check only the ISA of whichever CPU runs CI, so
# each kernel test binary is built for two levels instead:
#   x86-64-v3  AVX2 + FMA: every x86 machine CI runs on has it; its tests are
#              discovered one by one;
#   x86-64-v4  AVX-512 (F, BW, CD, DQ, VL): run as one test through
#              run-if-cpu-has.sh, which skips it, saying so, on a CPU without
#              AVX-512 (its binary would die on an illegal instruction, so
#              gtest discovery cannot list it there).
# Generated packages keep -march=native (the lit and numerics tests).

set(MODC_ISA_V4_FLAGS avx512f avx512bw avx512cd avx512dq avx512vl)

# modc_add_isa_test(NAME SOURCES... [COMPILE_FEATURES f...] [INCLUDES d...]
#                   [LIBS l...]): NAME built for x86-64-v3 (tests discovered),
# NAME_avx512 for x86-64-v4 (one test, skipped without AVX-512). Returns the
# v3 target's name in NAME itself.
function(modc_add_isa_test name)
  cmake_parse_arguments(ARG "" "DISCOVERY_TIMEOUT" "SOURCES;INCLUDES;LIBS;FEATURES" ${ARGN})
  foreach(variant v3 v4)
    if(variant STREQUAL "v3")
      set(target ${name})
    else()
      set(target ${name}_avx512)
    endif()
    add_executable(${target} ${ARG_SOURCES})
    target_include_directories(${target} PRIVATE ${ARG_INCLUDES})
    target_compile_options(${target} PRIVATE -O2 -march=x86-64-${variant})
    if(ARG_FEATURES)
      target_compile_features(${target} PRIVATE ${ARG_FEATURES})
    endif()
    target_link_libraries(${target} PRIVATE ${ARG_LIBS})
  endforeach()
  if(ARG_DISCOVERY_TIMEOUT)
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT ${ARG_DISCOVERY_TIMEOUT})
  else()
    gtest_discover_tests(${name})
  endif()
  add_test(NAME ${name}_avx512
    COMMAND ${PROJECT_SOURCE_DIR}/test/cmake/run-if-cpu-has.sh
            ${MODC_ISA_V4_FLAGS} -- $<TARGET_FILE:${name}_avx512>)
  set_tests_properties(${name}_avx512 PROPERTIES SKIP_RETURN_CODE 77)
endfunction()
