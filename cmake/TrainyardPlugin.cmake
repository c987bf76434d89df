# ty_add_backend_plugin(NAME SOURCES...)
#
# Builds libty_backend_<NAME>.so as a MODULE library in the build tree's
# plugin folder and installs it to <prefix>/lib/trainyard/backends. The plugin
# sees one include folder holding only hal/backend_abi.h, exports only
# ty_backend_query (hidden visibility), and must not leave symbols undefined
# (so it cannot quietly depend on the Trainyard core).
set(TY_PLUGIN_INCLUDE_DIR "${CMAKE_BINARY_DIR}/plugin-include")
configure_file("${CMAKE_SOURCE_DIR}/hal/backend_abi.h"
               "${TY_PLUGIN_INCLUDE_DIR}/hal/backend_abi.h" COPYONLY)

function(ty_add_backend_plugin NAME)
  cmake_parse_arguments(ARG "NO_INSTALL" "OUTPUT_DIR" "SOURCES" ${ARGN})
  set(target ty_backend_${NAME})
  add_library(${target} MODULE ${ARG_SOURCES} ${ARG_UNPARSED_ARGUMENTS})
  if(NOT ARG_OUTPUT_DIR)
    set(ARG_OUTPUT_DIR "${TY_PLUGIN_OUTPUT_DIR}")
  endif()
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "ty_backend_${NAME}"
    LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIR}"
    C_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  target_include_directories(${target} PRIVATE "${TY_PLUGIN_INCLUDE_DIR}")
  # Sanitizer runtimes leave symbols undefined in shared objects by design.
  if(NOT TY_SANITIZE)
    target_link_options(${target} PRIVATE "LINKER:-z,defs")
  endif()
  if(NOT ARG_NO_INSTALL)
    install(TARGETS ${target} LIBRARY DESTINATION "${TY_PLUGIN_SUBDIR}")
    # The in-tree plugins of the normal plugin folder (tests expect exactly these).
    set_property(GLOBAL APPEND PROPERTY TY_INTREE_PLUGINS ${NAME})
  endif()
endfunction()
