# Compiler flags and the optional parts (CUDA, OpenCL, oneDNN, MPI, NCCL).
# Each TY_WITH_<X> is AUTO (use it when found), ON (fail when missing) or OFF.

option(TY_WERROR "Treat warnings as errors" OFF)
set(TY_SANITIZE "" CACHE STRING "Sanitizers to build with, e.g. address,undefined")

add_compile_options(-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes)
# POSIX.1-2008 plus the GNU extensions glibc offers (getopt_long, realpath).
add_compile_definitions(_GNU_SOURCE)
if(TY_WERROR)
  add_compile_options(-Werror)
endif()
if(TY_SANITIZE)
  add_compile_options(-fsanitize=${TY_SANITIZE} -fno-omit-frame-pointer
                      -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${TY_SANITIZE})
endif()

set(TY_FEATURES "")
macro(ty_optional_feature NAME)
  set(TY_WITH_${NAME} AUTO CACHE STRING "Build with ${NAME}: AUTO, ON or OFF")
  set_property(CACHE TY_WITH_${NAME} PROPERTY STRINGS AUTO ON OFF)
endmacro()

# Resolves TY_WITH_<NAME> against whether it was FOUND; sets TY_HAVE_<NAME>.
function(ty_resolve_feature NAME FOUND DETAIL)
  string(TOUPPER "${TY_WITH_${NAME}}" mode)
  if(mode STREQUAL "OFF")
    set(have OFF)
    set(why "disabled (TY_WITH_${NAME}=OFF)")
  elseif(FOUND)
    set(have ON)
    set(why "found ${DETAIL}")
  elseif(mode STREQUAL "ON")
    message(FATAL_ERROR "TY_WITH_${NAME}=ON but ${NAME} was not found. "
                        "Install it (scripts/install-deps.sh) or set TY_WITH_${NAME}=AUTO.")
  else()
    set(have OFF)
    set(why "not found")
  endif()
  set(TY_HAVE_${NAME} ${have} PARENT_SCOPE)
  set_property(GLOBAL APPEND PROPERTY TY_FEATURE_LINES "  ${NAME}: ${why}")
  if(have)
    set_property(GLOBAL APPEND PROPERTY TY_FEATURE_LIST "${NAME}")
  endif()
endfunction()

foreach(f CUDA OPENCL ONEDNN MPI NCCL)
  ty_optional_feature(${f})
endforeach()

if(NOT TY_WITH_CUDA STREQUAL "OFF" OR NOT TY_WITH_NCCL STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
endif()
ty_resolve_feature(CUDA "${CUDAToolkit_FOUND}" "CUDA ${CUDAToolkit_VERSION} at ${CUDAToolkit_BIN_DIR}")

# The opencl plugin dlopens libOpenCL.so.1 at run time: building it needs the
# Khronos headers only (opencl-c-headers), never the library.
if(NOT TY_WITH_OPENCL STREQUAL "OFF")
  find_path(TY_OPENCL_INCLUDE_DIR CL/cl.h)
endif()
if(TY_OPENCL_INCLUDE_DIR)
  set(_opencl_found TRUE)
else()
  set(_opencl_found FALSE)
endif()
ty_resolve_feature(OPENCL "${_opencl_found}" "OpenCL headers in ${TY_OPENCL_INCLUDE_DIR}")

if(NOT TY_WITH_ONEDNN STREQUAL "OFF")
  find_package(dnnl CONFIG QUIET)
endif()
ty_resolve_feature(ONEDNN "${dnnl_FOUND}" "oneDNN ${dnnl_VERSION}")

if(NOT TY_WITH_MPI STREQUAL "OFF")
  find_package(MPI QUIET COMPONENTS C)
endif()
ty_resolve_feature(MPI "${MPI_C_FOUND}" "MPI ${MPI_C_VERSION}")

if(NOT TY_WITH_NCCL STREQUAL "OFF")
  find_library(TY_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(TY_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
endif()
if(TY_NCCL_LIBRARY AND TY_NCCL_INCLUDE_DIR)
  set(_nccl_found TRUE)
else()
  set(_nccl_found FALSE)
endif()
ty_resolve_feature(NCCL "${_nccl_found}" "${TY_NCCL_LIBRARY}")

function(ty_print_feature_summary)
  get_property(lines GLOBAL PROPERTY TY_FEATURE_LINES)
  string(REPLACE ";" "\n" text "${lines}")
  message(STATUS "Trainyard optional parts:\n${text}")
endfunction()
