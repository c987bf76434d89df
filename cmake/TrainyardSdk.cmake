# Installs the plugin SDK beside the trainyard command and its plugins:
#
#   include/trainyard/*.h                   the SDK headers (cmake/TrainyardPlugin.cmake)
#   lib/libty_backend_support.a             the backend support library
#   lib/libty_host_kernels.a                the cpu plugin's kernels for host plugins
#   lib/pkgconfig/trainyard-plugin.pc       pkg-config --cflags --libs trainyard-plugin
#   lib/pkgconfig/trainyard-host-kernels.pc (the same with the host kernels)
#   lib/cmake/Trainyard/                    find_package(Trainyard): Trainyard::plugin and
#                                           trainyard_add_backend_plugin()
#   share/doc/trainyard/                    plugin-abi.md and the out-of-tree example
#
# Every installed file finds the others by relative paths, so a tree
# installed with `cmake --install build --prefix DIR` works wherever it lands.
include(CMakePackageConfigHelpers)

# A component of their own too, so that tests/sdk installs just them quickly.
install(FILES ${TY_SDK_HEADER_FILES} DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/trainyard"
        COMPONENT sdk_headers)
install(TARGETS ty_backend_support ty_plugin_sdk ty_host_kernels EXPORT TrainyardTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")

set(TY_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/Trainyard")
# 1 or 0 for TrainyardConfig.cmake: what Trainyard::host_kernels links.
set(TY_SDK_NEEDS_OPENMP 0)
if(TY_CPU_OPENMP)
  set(TY_SDK_NEEDS_OPENMP 1)
endif()
set(TY_SDK_NEEDS_ONEDNN 0)
if(TY_HAVE_ONEDNN)
  set(TY_SDK_NEEDS_ONEDNN 1)
endif()
install(EXPORT TrainyardTargets NAMESPACE Trainyard:: DESTINATION "${TY_CMAKE_INSTALL_DIR}")
configure_package_config_file(
  "${CMAKE_CURRENT_LIST_DIR}/TrainyardConfig.cmake.in"
  "${CMAKE_BINARY_DIR}/sdk/TrainyardConfig.cmake"
  INSTALL_DESTINATION "${TY_CMAKE_INSTALL_DIR}"
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_BINDIR TY_PLUGIN_SUBDIR)
# The package version is the project's; the plugin ABI a plugin is built
# for is checked again when the plugin loads.
write_basic_package_version_file("${CMAKE_BINARY_DIR}/sdk/TrainyardConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMajorVersion)
install(FILES
  "${CMAKE_BINARY_DIR}/sdk/TrainyardConfig.cmake"
  "${CMAKE_BINARY_DIR}/sdk/TrainyardConfigVersion.cmake"
  "${CMAKE_CURRENT_LIST_DIR}/TrainyardPluginHelpers.cmake"
  DESTINATION "${TY_CMAKE_INSTALL_DIR}")

# pkg-config: the prefix is found from the .pc file's own folder.
set(TY_PC_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
file(RELATIVE_PATH TY_PC_TO_PREFIX "/prefix/${TY_PC_INSTALL_DIR}" "/prefix")
string(REGEX REPLACE "/$" "" TY_PC_TO_PREFIX "${TY_PC_TO_PREFIX}")
set(TY_PC_SANITIZE_LIBS "")
if(TY_SANITIZE)
  set(TY_PC_SANITIZE_LIBS " -fsanitize=${TY_SANITIZE}")
endif()
configure_file("${CMAKE_CURRENT_LIST_DIR}/trainyard-plugin.pc.in"
               "${CMAKE_BINARY_DIR}/sdk/trainyard-plugin.pc" @ONLY)
set(TY_PC_HOST_KERNEL_LIBS "")
if(TY_CPU_OPENMP)
  string(APPEND TY_PC_HOST_KERNEL_LIBS " ${OpenMP_C_FLAGS}")
endif()
if(TY_HAVE_ONEDNN)
  string(APPEND TY_PC_HOST_KERNEL_LIBS " -ldnnl")
endif()
configure_file("${CMAKE_CURRENT_LIST_DIR}/trainyard-host-kernels.pc.in"
               "${CMAKE_BINARY_DIR}/sdk/trainyard-host-kernels.pc" @ONLY)
install(FILES "${CMAKE_BINARY_DIR}/sdk/trainyard-plugin.pc"
              "${CMAKE_BINARY_DIR}/sdk/trainyard-host-kernels.pc"
        DESTINATION "${TY_PC_INSTALL_DIR}")

install(FILES "${CMAKE_SOURCE_DIR}/docs/plugin-abi.md" "${CMAKE_SOURCE_DIR}/docs/ops.md"
        DESTINATION "${CMAKE_INSTALL_DOCDIR}")
install(DIRECTORY "${CMAKE_SOURCE_DIR}/examples/out-of-tree-plugin"
        DESTINATION "${CMAKE_INSTALL_DOCDIR}/examples"
        PATTERN "build*" EXCLUDE PATTERN "*.so" EXCLUDE)
install(FILES "${TY_TEMPLATE_SOURCE}" DESTINATION "${CMAKE_INSTALL_DOCDIR}/examples/template")
