# Precompiled headers (TROIKA_PRECOMPILED_HEADERS, default ON): the standard library, Abseil,
# Protocol Buffers, gRPC and the generated troika.pb.h are parsed once per build instead of
# once per source file. They are about three quarters of a typical translation unit's compile
# time (gcc -ftime-report: parsing and template instantiation of ~220,000 preprocessed lines),
# and the build is on the test command's critical path twice (the tree and `pip install .`;
# docs/testing.md).
#
# One header set is compiled per set of flags that a precompiled header must share with its
# users (gcc refuses one built with -fPIC in an -fPIE compile; -g levels and -D's of our own
# may differ): libraries (-fPIC), programs (-fPIE) and test programs (-fPIE, with GoogleTest).
# Every other C++ target of the directories named below reuses its kind's. The Python modules
# and TensorFlow's op library (python/) keep none: they build against a framework's own flags.
# Sources are still written to include what they use: the headers below are only compiled
# ahead, and a build with -DTROIKA_PRECOMPILED_HEADERS=OFF compiles the same tree.

set(troika_pch_headers
  <algorithm> <atomic> <chrono> <condition_variable> <cstdint> <cstdio> <cstring> <deque>
  <functional> <map> <memory> <mutex> <optional> <set> <string> <thread> <utility> <vector>
  <absl/status/status.h> <absl/status/statusor.h> <absl/strings/str_cat.h>
  <absl/strings/str_join.h> <absl/strings/str_split.h> <absl/time/clock.h> <absl/time/time.h>
  <troika/v1/troika.pb.h> <troika/v1/troika.grpc.pb.h> <grpcpp/grpcpp.h>)

# troika_pch_anchor(NAME EXECUTABLE|LIBRARY [HEADERS...] [USAGE imported targets...]): the
# target that compiles a header set; its users name it with REUSE_FROM. It links nothing of
# ours (the headers are all in the system's include path but the generated ones): a user must
# not gain libraries, nor a layer a dependency, by reusing it. USAGE: imported targets whose
# compile definitions its users have too (GoogleTest's GTEST_HAS_PTHREAD for the tests').
function(troika_pch_anchor name kind)
  cmake_parse_arguments(A "" "" "HEADERS;USAGE" ${ARGN})
  file(WRITE ${CMAKE_BINARY_DIR}/pch/${name}.cc "// The translation unit that builds ${name}'s precompiled header.\n")
  add_library(${name} OBJECT ${CMAKE_BINARY_DIR}/pch/${name}.cc)
  if(kind STREQUAL "EXECUTABLE")
    # Compiled as a program's sources are: -fPIE, not an object library's -fPIC.
    set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
    target_compile_options(${name} PRIVATE -fPIE)
  endif()
  troika_pch_flags(${name})
  add_dependencies(${name} troika_proto)
  target_link_libraries(${name} PRIVATE ${A_USAGE})
  target_precompile_headers(${name} PRIVATE ${troika_pch_headers} ${A_HEADERS})
endfunction()

# What a header set's compile and its users' must share beyond the build's flags: the
# generated headers' directory, and -pthread (gcc refuses a header compiled with _REENTRANT
# defined where it is not, and gRPC's users compile with it).
function(troika_pch_flags target)
  target_include_directories(${target} PRIVATE ${PROJECT_BINARY_DIR}/proto)
  target_compile_options(${target} PRIVATE -pthread)
endfunction()

# troika_pch_targets(OUT DIR): the C++ targets defined in DIR and below.
function(troika_pch_targets out dir)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    troika_pch_targets(more ${sub})
    list(APPEND targets ${more})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# troika_use_precompiled_headers(DIRS...): every library and program of DIRS reuses its
# kind's header set. (Headers are named in <>: CMake would take "x.h" as a path here.)
function(troika_use_precompiled_headers)
  troika_pch_anchor(troika_pch_library LIBRARY)
  troika_pch_anchor(troika_pch_program EXECUTABLE)
  if(TROIKA_BUILD_TESTS)
    troika_pch_anchor(troika_pch_test EXECUTABLE HEADERS <gtest/gtest.h> <gmock/gmock.h>
                      USAGE GTest::gtest GTest::gmock)
  endif()
  foreach(dir IN LISTS ARGN)
    troika_pch_targets(targets ${dir})
    foreach(target IN LISTS targets)
      get_target_property(type ${target} TYPE)
      get_target_property(sources ${target} SOURCES)
      list(FILTER sources INCLUDE REGEX "\\.cc$")
      if(NOT sources OR target MATCHES "^troika_pch_")
        continue()
      endif()
      if(type MATCHES "^(EXECUTABLE|(STATIC|SHARED|OBJECT|MODULE)_LIBRARY)$")
        troika_pch_flags(${target})
      endif()
      if(type STREQUAL "EXECUTABLE")
        get_target_property(libraries ${target} LINK_LIBRARIES)
        if(TROIKA_BUILD_TESTS AND "GTest::gtest" IN_LIST libraries)
          target_precompile_headers(${target} REUSE_FROM troika_pch_test)
        else()
          target_precompile_headers(${target} REUSE_FROM troika_pch_program)
        endif()
      elseif(type MATCHES "^(STATIC|SHARED|OBJECT|MODULE)_LIBRARY$")
        target_precompile_headers(${target} REUSE_FROM troika_pch_library)
      endif()
    endforeach()
  endforeach()
endfunction()
