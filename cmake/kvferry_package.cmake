# Debian packages from CPack (`make package`, or `cpack` in the build folder; docs/deploy.md):
#
#   kvferry_<version>_<arch>.deb      component Runtime: the CLI and the systemd unit. Its
#                                     dependencies are the shared libraries the binary links,
#                                     found by dpkg-shlibdeps (UCX, ZeroMQ, httplib, OpenSSL, ...)
#   kvferry-dev_<version>_<arch>.deb  component Development: headers, static libraries, the CMake
#                                     package; depends on the -dev packages find_package needs
#
# kvferry's postinst creates the system user `kvferry` the unit runs as and /etc/kvferry; it
# enables and starts nothing.
include_guard(GLOBAL)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME kvferry)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "kvferry")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Prefill/decode-disaggregated LLM serving on the CPU (OpenAI-compatible)")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "kvferry developers <kvferry@localhost>")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Strips the executable (static archives keep their symbols: CMake strips only executables and
# shared objects).
set(CPACK_STRIP_FILES ON)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL Runtime Development)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME kvferry)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
# passwd: useradd in postinst. The rest comes from dpkg-shlibdeps.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "passwd")
# `kvferry bench xfer` measures its ceilings with these when they are installed.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "iperf3, ucx-utils")
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
    "Prefill/decode-disaggregated LLM serving on the CPU\n kvferry serve runs an OpenAI-compatible instance (prefill, decode or colocated),\n kvferry proxy routes requests from prefill to decode instances. Includes the\n systemd unit kvferry-serve@.service (not enabled).")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/packaging/debian/postinst ${PROJECT_SOURCE_DIR}/packaging/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME kvferry-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS
    "cmake, pkg-config, libfmt-dev, libspdlog-dev, nlohmann-json3-dev, libssl-dev, libmsgpack-cxx-dev, libucx-dev, libzmq3-dev, libcpp-httplib-dev, libpcre2-dev, libutf8proc-dev, libxxhash-dev")
set(CPACK_DEBIAN_DEVELOPMENT_DESCRIPTION
    "kvferry libraries and headers\n Static libraries of every kvferry layer, the public headers and a CMake package:\n find_package(kvferry) gives kvferry::connector, kvferry::transfer, ...")

include(CPack)
