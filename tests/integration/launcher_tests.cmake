# troikarun and the example as real processes. Included from tests/integration/CMakeLists.txt.
troika_test(launcher_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/troikarun_test.cc ${CMAKE_CURRENT_LIST_DIR}/example_train_test.cc
  LIBS absl::strings absl::time
  TIMEOUT 300)
target_compile_definitions(launcher_test PRIVATE
  TROIKARUN_BINARY="$<TARGET_FILE:troikarun>"
  EXAMPLE_TRAIN_BINARY="$<TARGET_FILE:troika-example-train>")
add_dependencies(launcher_test troikarun troika-example-train)
