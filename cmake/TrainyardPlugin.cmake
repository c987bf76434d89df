# The plugin SDK inside the Trainyard build: the SDK headers, generated into
# <build>/include/trainyard/ exactly as they are installed, and
# ty_add_backend_plugin(), the in-tree wrapper of the installed
# trainyard_add_backend_plugin() (cmake/TrainyardPluginHelpers.cmake).
#
# In-tree plugins are built the way an out-of-tree plugin is: the template
# sees only <build>/include (trainyard/*.h) through Trainyard::plugin, so a
# header it needs that the SDK lacks fails here, not for a plugin author.

# <build>/include mirrors <prefix>/include, and <build>/bin mirrors
# <prefix>/bin, so `trainyard --version` finds the headers beside itself in
# either tree.
set(TY_PLUGIN_INCLUDE_DIR "${CMAKE_BINARY_DIR}/include")

# SDK header -> its source. Each is copied to include/trainyard/<name> with
# its includes of other SDK headers ("hal/x.h", "ops/reference/x.h", ... as
# listed here) rewritten to "trainyard/<name>"; an include of anything else
# is a configure error, so the SDK stays self-contained. A block between
# TY_SDK_HOST_ONLY_BEGIN and TY_SDK_HOST_ONLY_END comments (hal/status.h) is
# the core's side of the boundary and is left out of the copy. In-tree
# plugins include only these (tests/sdk/test_plugin_headers.py checks it
# from an installed tree); docs/plugin-abi.md lists them (tests/docs checks).
set(TY_SDK_HEADERS
  "backend_abi.h=hal/backend_abi.h"
  "status.h=hal/status.h"
  "dtype.h=hal/dtype.h"
  "file.h=hal/file.h"
  "half.h=hal/half.h"
  "philox.h=hal/philox.h"
  "sha256.h=hal/sha256.h"
  "ref_rope.h=ops/reference/ref_rope.h"
  "ref_sample.h=ops/reference/ref_sample.h"
  "abi_graph.h=hal/abi_graph.h"
  "artifact_io.h=backends/common/artifact_io.h"
  "device_backend.h=backends/common/device_backend.h"
  "device_errors.h=backends/common/device_errors.h"
  "sample_params.h=backends/common/sample_params.h"
  "device_exec.h=backends/common/device_exec.h"
  "device_op_list.h=backends/common/device_op_list.h"
  "device_ops.h=backends/common/device_ops.h"
  "host_buffers.h=backends/common/host_buffers.h"
  "host_executor.h=backends/common/host_executor.h"
  "host_meter.h=backends/common/host_meter.h"
  "host_profile.h=backends/common/host_profile.h"
  "memory_plan.h=hal/memory_plan.h"
  "op_shapes.h=backends/common/op_shapes.h"
  "plugin_status.h=backends/common/plugin_status.h"
  "host_kernels.h=backends/cpu/cpu_kernel_table.h")

set(TY_SDK_HEADER_FILES "")
file(MAKE_DIRECTORY "${TY_PLUGIN_INCLUDE_DIR}/trainyard")
set(_ty_sdk_names "")
set(_ty_sdk_sources "")
foreach(entry IN LISTS TY_SDK_HEADERS)
  string(REPLACE "=" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 source)
  list(APPEND _ty_sdk_names "${name}")
  list(APPEND _ty_sdk_sources "${source}")
endforeach()
foreach(entry IN LISTS TY_SDK_HEADERS)
  string(REPLACE "=" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 source)
  set(src "${CMAKE_SOURCE_DIR}/${source}")
  set_property(DIRECTORY "${CMAKE_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${src}")
  file(READ "${src}" text)
  string(REGEX REPLACE "/\\* TY_SDK_HOST_ONLY_BEGIN.*/\\* TY_SDK_HOST_ONLY_END \\*/\n" ""
         text "${text}")
  string(REGEX MATCHALL "#include \"[^\"]*\"" includes "${text}")
  foreach(inc IN LISTS includes)
    string(REGEX REPLACE "#include \"([^\"]*)\"" "\\1" included "${inc}")
    list(FIND _ty_sdk_sources "${included}" index)
    if(index LESS 0 AND included MATCHES "^trainyard/(.*)$")
      # A plugin's header already in SDK form (backends/cpu/cpu_kernel_table.h).
      list(FIND _ty_sdk_names "${CMAKE_MATCH_1}" index)
    endif()
    if(index LESS 0)
      message(FATAL_ERROR "SDK header ${source} has ${inc}, which is not an SDK header: "
                          "an installed plugin could not compile it (cmake/TrainyardPlugin.cmake)")
    endif()
    list(GET _ty_sdk_names ${index} included_name)
    string(REPLACE "${inc}" "#include \"trainyard/${included_name}\"" text "${text}")
  endforeach()
  set(dst "${TY_PLUGIN_INCLUDE_DIR}/trainyard/${name}")
  file(WRITE "${CMAKE_BINARY_DIR}/CMakeFiles/ty_sdk_${name}.tmp" "${text}")
  file(COPY_FILE "${CMAKE_BINARY_DIR}/CMakeFiles/ty_sdk_${name}.tmp" "${dst}" ONLY_IF_DIFFERENT)
  list(APPEND TY_SDK_HEADER_FILES "${dst}")
endforeach()

# The plugin ABI version, read from the one header that defines it.
file(STRINGS "${CMAKE_SOURCE_DIR}/hal/backend_abi.h" _ty_abi_lines
     REGEX "^#define TY_ABI_M(AJOR|INOR) ")
string(REGEX MATCH "TY_ABI_MAJOR ([0-9]+)" _ "${_ty_abi_lines}")
set(TY_ABI_MAJOR_VALUE ${CMAKE_MATCH_1})
string(REGEX MATCH "TY_ABI_MINOR ([0-9]+)" _ "${_ty_abi_lines}")
set(TY_ABI_MINOR_VALUE ${CMAKE_MATCH_1})

set(TRAINYARD_PLUGIN_SUBDIR "${TY_PLUGIN_SUBDIR}")
set(TRAINYARD_SANITIZE "${TY_SANITIZE}")
include("${CMAKE_CURRENT_LIST_DIR}/TrainyardPluginHelpers.cmake")

# ty_add_backend_plugin(NAME SOURCES... [OUTPUT_DIR DIR] [NO_INSTALL]):
# trainyard_add_backend_plugin with the build tree's plugin folder as the
# default OUTPUT_DIR. Installed in-tree plugins are recorded in a global
# property that becomes TY_TEST_INTREE_PLUGINS (tests expect exactly these).
function(ty_add_backend_plugin NAME)
  cmake_parse_arguments(ARG "NO_INSTALL" "OUTPUT_DIR" "SOURCES" ${ARGN})
  if(NOT ARG_OUTPUT_DIR)
    set(ARG_OUTPUT_DIR "${TY_PLUGIN_OUTPUT_DIR}")
  endif()
  set(install_arg "")
  if(ARG_NO_INSTALL)
    set(install_arg NO_INSTALL)
  endif()
  trainyard_add_backend_plugin(${NAME} SOURCES ${ARG_SOURCES} ${ARG_UNPARSED_ARGUMENTS}
                               OUTPUT_DIR "${ARG_OUTPUT_DIR}" ${install_arg})
  if(NOT ARG_NO_INSTALL)
    set_property(GLOBAL APPEND PROPERTY TY_INTREE_PLUGINS ${NAME})
  endif()
endfunction()
