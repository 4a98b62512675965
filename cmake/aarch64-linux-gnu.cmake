# Cross compiling for arm64 Linux with Debian's GNU toolchain (g++-aarch64-linux-gnu), the
# target's libraries found only under its sysroot. Tests run through qemu-user: ctest and
# gtest_discover_tests prefix every test command with the emulator; the emulated CPU
# is chosen with QEMU_CPU (scripts/test-neon.sh runs "max", with I8MM and dotprod,
# "neoverse-n1", with dotprod only, and "cortex-a53", with neither).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)

# nlohmann-json is header-only, so the build machine's package (Debian's nlohmann-json3-dev,
# which scripts/install-deps.sh installs) serves the target as it is; its headers are in
# /usr/include, which the cross compiler searches last.
if(NOT DEFINED nlohmann_json_DIR AND EXISTS /usr/share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake)
  set(nlohmann_json_DIR /usr/share/cmake/nlohmann_json)
endif()
