# What `cmake --install` and the Debian packages (cmake/kvferry_package.cmake) hold
# (docs/deploy.md, "Install"):
#
#   component Runtime      bin/kvferry, the systemd unit kvferry-serve@.service (not enabled),
#                          an example environment file and the deployment guide
#   component Development  the public headers (include/kvferry), the layer libraries (static,
#                          position-independent) and a CMake package: find_package(kvferry)
#                          gives kvferry::<layer> targets, e.g. kvferry::connector
#
# Only the layers listed here are installed; test and benchmark libraries are not.
include_guard(GLOBAL)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(KVFERRY_INSTALLED_LAYERS common formats jinja tokenizer kv kv_events kv_offload transfer connector_leases connector
    engine http cluster server proxy)

# Everything the install rules copy, so that `make package` need not build tests and benchmarks.
set(_kvf_installed_targets kvferry)
foreach(layer ${KVFERRY_INSTALLED_LAYERS})
  list(APPEND _kvf_installed_targets kvferry_${layer})
endforeach()
add_custom_target(installable DEPENDS ${_kvf_installed_targets})

install(TARGETS kvferry RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/systemd/kvferry-serve@.service
        DESTINATION lib/systemd/system COMPONENT Runtime)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/systemd/kvferry-serve.env.example
              ${PROJECT_SOURCE_DIR}/docs/deploy.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT Runtime)

foreach(layer ${KVFERRY_INSTALLED_LAYERS})
  install(TARGETS kvferry_${layer} EXPORT kvferryTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT Development)
endforeach()
# CMake strips executables only; archives built with -g would make kvferry-dev ten times larger.
# With stripping on (`cmake --install --strip`, CPack's CPACK_STRIP_FILES) their debug sections
# go too; the symbols stay.
foreach(layer ${KVFERRY_INSTALLED_LAYERS})
  install(CODE "
    if(CMAKE_INSTALL_DO_STRIP)
      execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-debug
        \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/libkvferry_${layer}.a\")
    endif()" COMPONENT Development)
endforeach()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kvferry
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT Development)

set(KVFERRY_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvferry)
install(EXPORT kvferryTargets NAMESPACE kvferry:: DESTINATION ${KVFERRY_CMAKE_DIR}
        COMPONENT Development)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvferryConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kvferryConfig.cmake
                              INSTALL_DESTINATION ${KVFERRY_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kvferryConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kvferryConfig.cmake
              ${PROJECT_BINARY_DIR}/kvferryConfigVersion.cmake
        DESTINATION ${KVFERRY_CMAKE_DIR} COMPONENT Development)
