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
#
# The AVX-512 binaries take a sixth of the build on two cores. On a build
# machine without AVX-512 they could only be skipped, so by default
# (MODC_AVX512_TESTS=AUTO) they are built only where /proc/cpuinfo lists
# every v4 flag; ON builds them anyway (to run elsewhere), OFF never.

set(MODC_ISA_V4_FLAGS avx512f avx512bw avx512cd avx512dq avx512vl)
set(MODC_AVX512_TESTS AUTO CACHE STRING
    "Build the AVX-512 kernel test binaries: AUTO (if this CPU runs them), ON, OFF")
set_property(CACHE MODC_AVX512_TESTS PROPERTY STRINGS AUTO ON OFF)

set(modcBuildV4Tests ${MODC_AVX512_TESTS})
set(modcV4Missing "")
set(modcV4SkipReason "MODC_AVX512_TESTS=${MODC_AVX512_TESTS}")
if(MODC_AVX512_TESTS STREQUAL "AUTO")
  set(modcBuildV4Tests ON)
  if(EXISTS /proc/cpuinfo)
    file(STRINGS /proc/cpuinfo modcCpuFlags REGEX "^flags" LIMIT_COUNT 1)
    foreach(flag ${MODC_ISA_V4_FLAGS})
      if(NOT " ${modcCpuFlags} " MATCHES " ${flag} ")
        list(APPEND modcV4Missing ${flag})
      endif()
    endforeach()
    if(modcV4Missing)
      set(modcBuildV4Tests OFF)
      list(JOIN modcV4Missing " " modcV4MissingText)
      set(modcV4SkipReason "this CPU lacks ${modcV4MissingText}")
      message(STATUS "AVX-512 kernel tests not built: ${modcV4SkipReason} "
                     "(-DMODC_AVX512_TESTS=ON builds them)")
    endif()
  endif()
endif()

# modc_add_isa_test(NAME SOURCES... [COMPILE_FEATURES f...] [INCLUDES d...]
#                   [LIBS l...] [V3_ONLY]): NAME built for x86-64-v3 (tests
# discovered), NAME_avx512 for x86-64-v4 (one test, skipped without
# AVX-512). V3_ONLY: no v4 build, for tests whose subject is not the CPU
# prelude (which its own suites check on both levels). Returns the v3
# target's name in NAME itself.
function(modc_add_isa_test name)
  cmake_parse_arguments(ARG "V3_ONLY" "DISCOVERY_TIMEOUT" "SOURCES;INCLUDES;LIBS;FEATURES" ${ARGN})
  set(variants v3)
  if(modcBuildV4Tests AND NOT ARG_V3_ONLY)
    list(APPEND variants v4)
  endif()
  foreach(variant ${variants})
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
  if(ARG_V3_ONLY)
    return()
  endif()
  if(modcBuildV4Tests)
    add_test(NAME ${name}_avx512
      COMMAND ${PROJECT_SOURCE_DIR}/test/cmake/run-if-cpu-has.sh
              ${MODC_ISA_V4_FLAGS} -- $<TARGET_FILE:${name}_avx512>)
  else()
    # Still listed, and skipped with the reason, so the gap shows in ctest.
    add_test(NAME ${name}_avx512
      COMMAND sh -c "echo 'skipped: not built (${modcV4SkipReason})'; exit 77")
  endif()
  set_tests_properties(${name}_avx512 PROPERTIES SKIP_RETURN_CODE 77)
endfunction()
