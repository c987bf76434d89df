# trainyard_add_backend_plugin(NAME SOURCES... [OUTPUT_DIR DIR]
#                              [INSTALL_DIR DIR | NO_INSTALL])
#
# Builds a Trainyard backend plugin: the MODULE library libty_backend_<NAME>.so
# (the file name the loader looks for; NAME must match [a-z0-9_]+ and equal
# the table's .name), compiled with hidden visibility so that it exports only
# ty_backend_query (TY_BACKEND_EXPORT), linked against Trainyard::plugin (the
# SDK headers <trainyard/...> and the backend support library), and linked
# with -z defs so that an undefined symbol - a call into the Trainyard core,
# which a plugin never links - fails at link time instead of at dlopen.
# (Sanitizer builds skip -z defs: their runtimes leave symbols undefined in
# shared objects by design.)
#
# The plugin is installed to <prefix>/lib/trainyard/backends, where a
# trainyard installed in the same prefix finds it; INSTALL_DIR changes that
# (then point TRAINYARD_BACKEND_PATH or --plugin-path at it), NO_INSTALL
# skips it. OUTPUT_DIR is the build-tree folder (default: the binary dir),
# so `trainyard --plugin-path <OUTPUT_DIR>` finds it before installing.
#
# Installed as lib/cmake/Trainyard/TrainyardPluginHelpers.cmake; the
# Trainyard build uses the same function for its own plugins.
if(NOT DEFINED TRAINYARD_PLUGIN_SUBDIR)
  set(TRAINYARD_PLUGIN_SUBDIR "lib/trainyard/backends")
endif()

function(trainyard_add_backend_plugin NAME)
  cmake_parse_arguments(ARG "NO_INSTALL" "OUTPUT_DIR;INSTALL_DIR" "SOURCES" ${ARGN})
  if(NOT NAME MATCHES "^[a-z0-9_]+$")
    message(FATAL_ERROR "trainyard_add_backend_plugin: backend name '${NAME}' must match "
                        "[a-z0-9_]+ (it is what users type in device URIs)")
  endif()
  set(sources ${ARG_SOURCES} ${ARG_UNPARSED_ARGUMENTS})
  if(NOT sources)
    message(FATAL_ERROR "trainyard_add_backend_plugin(${NAME}): no SOURCES")
  endif()
  set(target ty_backend_${NAME})
  add_library(${target} MODULE ${sources})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "ty_backend_${NAME}"
    SUFFIX ".so"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON)
  if(ARG_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIR}")
  endif()
  target_link_libraries(${target} PRIVATE Trainyard::plugin)
  if(NOT TRAINYARD_SANITIZE)
    target_link_options(${target} PRIVATE "LINKER:-z,defs")
  endif()
  if(NOT ARG_NO_INSTALL)
    if(NOT ARG_INSTALL_DIR)
      set(ARG_INSTALL_DIR "${TRAINYARD_PLUGIN_SUBDIR}")
    endif()
    install(TARGETS ${target} LIBRARY DESTINATION "${ARG_INSTALL_DIR}")
  endif()
endfunction()
