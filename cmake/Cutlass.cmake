# CUTLASS's C++ headers, for the CUDA packages modc builds with
# --cuda-gemms=cutlass (docs/cuda.md, "CUTLASS"). Neither modc nor the
# runtime links anything of CUTLASS: modc only passes these directories to
# nvcc and records the version in the package's manifest.
#
# scripts/install-deps.sh installs pip's nvidia-cutlass wheel (pinned) into
# /opt/modc-cutlass-<version>; MODC_CUTLASS_INCLUDE_DIR names another copy
# (the include/ directory that holds cutlass/version.h). Without one,
# modc still compiles and --emit=source still prints CUTLASS packages, but
# building one fails with a message that says so.
set(MODC_CUTLASS_WHEEL_VERSION 4.2.0.0)
find_path(MODC_CUTLASS_INCLUDE_DIR cutlass/version.h
  HINTS /opt/modc-cutlass-${MODC_CUTLASS_WHEEL_VERSION}/cutlass_library/source/include
  DOC "CUTLASS's include/ directory (holding cutlass/version.h) for --cuda-gemms=cutlass")
set(MODC_CUTLASS_VERSION "")
set(MODC_CUTLASS_UTIL_INCLUDE_DIR "")
set(MODC_CUTLASS_FOUND_DIR "")
if(MODC_CUTLASS_INCLUDE_DIR)
  set(MODC_CUTLASS_FOUND_DIR ${MODC_CUTLASS_INCLUDE_DIR})
  file(STRINGS ${MODC_CUTLASS_INCLUDE_DIR}/cutlass/version.h cutlassVersionLines
       REGEX "^#define CUTLASS_(MAJOR|MINOR|PATCH) ")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "CUTLASS_${part} +([0-9]+)" _ "${cutlassVersionLines}")
    set(cutlass${part} ${CMAKE_MATCH_1})
  endforeach()
  set(MODC_CUTLASS_VERSION "${cutlassMAJOR}.${cutlassMINOR}.${cutlassPATCH}")
  # The utilities beside it (tools/util/include), where the copy has them.
  get_filename_component(cutlassRoot ${MODC_CUTLASS_INCLUDE_DIR} DIRECTORY)
  if(EXISTS ${cutlassRoot}/tools/util/include/cutlass/util)
    set(MODC_CUTLASS_UTIL_INCLUDE_DIR ${cutlassRoot}/tools/util/include)
  endif()
  message(STATUS "CUTLASS ${MODC_CUTLASS_VERSION} for --cuda-gemms=cutlass: ${MODC_CUTLASS_INCLUDE_DIR}")
else()
  message(STATUS "CUTLASS not found: modc cannot build --cuda-gemms=cutlass "
                 "packages (scripts/install-deps.sh installs it; or set "
                 "MODC_CUTLASS_INCLUDE_DIR)")
endif()

# Tells `target`'s sources where CUTLASS is (CutlassGemms.cpp).
function(modc_tell_cutlass target)
  target_compile_definitions(${target} PRIVATE
    MODC_CUTLASS_INCLUDE_DIR="${MODC_CUTLASS_FOUND_DIR}"
    MODC_CUTLASS_UTIL_INCLUDE_DIR="${MODC_CUTLASS_UTIL_INCLUDE_DIR}"
    MODC_CUTLASS_VERSION="${MODC_CUTLASS_VERSION}")
endfunction()
