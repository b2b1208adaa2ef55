# What `cmake --install build --prefix P` installs, and the Debian package
# (`cpack --config build/CPackConfig.cmake`): the tools, the runtime as a
# shared library with its headers, its CMake package and pkg-config file,
# the docs and the examples. modc embeds its kernel preludes and the package
# ABI header, so an installed modc needs no source tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS modrt_shared EXPORT modrtTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY runtime/include/modrt
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET modrun)
  install(TARGETS modrun RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
# The communicator plugins (docs/distributed.md), beside libmodrt.so, where
# modrt looks for them.
if(MODRT_PLUGINS)
  install(TARGETS ${MODRT_PLUGINS} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
if(MODC_BUILD_COMPILER)
  install(TARGETS modc mod-opt mod-translate
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

set(modrtCMakeDir ${CMAKE_INSTALL_LIBDIR}/cmake/modrt)
install(EXPORT modrtTargets NAMESPACE modrt:: DESTINATION ${modrtCMakeDir})
configure_package_config_file(cmake/modrtConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/modrtConfig.cmake
  INSTALL_DESTINATION ${modrtCMakeDir})
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/modrtConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/modrtConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/modrtConfigVersion.cmake
  DESTINATION ${modrtCMakeDir})
configure_file(cmake/modrt.pc.in ${CMAKE_CURRENT_BINARY_DIR}/modrt.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/modrt.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES examples/tiny-mod.json examples/tiny-mod-bf16.json
  DESTINATION ${CMAKE_INSTALL_DATADIR}/modc/examples)
install(FILES examples/generate/CMakeLists.txt examples/generate/main.cpp
  DESTINATION ${CMAKE_INSTALL_DATADIR}/modc/examples/generate)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME modc)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Compiler and runtime for Mixture-of-Depths transformers")
set(CPACK_PACKAGE_CONTACT "modc developers")
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libmlir-22, libllvm22, libopenblas0-openmp | libopenblas0, libgomp1, g++, nlohmann-json3-dev, libpcre2-8-0")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
include(CPack)
