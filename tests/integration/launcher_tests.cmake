# troikarun and the example as real processes. Included from tests/integration/CMakeLists.txt.
troika_test(launcher_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/troikarun_test.cc ${CMAKE_CURRENT_LIST_DIR}/example_train_test.cc
  LIBS absl::strings absl::time
  TIMEOUT 300)
target_compile_definitions(launcher_test PRIVATE
  TROIKARUN_BINARY="$<TARGET_FILE:troikarun>"
  EXAMPLE_TRAIN_BINARY="$<TARGET_FILE:troika-example-train>")
add_dependencies(launcher_test troikarun troika-agent troika-example-train)

# troika-agent processes against an in-process coordinator (and a coordinator process).
troika_test(agent_process_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/agent_test.cc
  LIBS troika_coordinator absl::strings absl::time TIMEOUT 300)
target_compile_definitions(agent_process_test PRIVATE
  TROIKARUN_BINARY="$<TARGET_FILE:troikarun>"
  COORDINATOR_BINARY="$<TARGET_FILE:troika-coordinator>"
  AGENT_BINARY="$<TARGET_FILE:troika-agent>"
  EXAMPLE_TRAIN_BINARY="$<TARGET_FILE:troika-example-train>")
add_dependencies(agent_process_test troika-agent troikarun troika-coordinator troika-example-train)

# Fail-fast through troikarun and two agents (real processes).
add_executable(troika-test-fault-rank ${CMAKE_CURRENT_LIST_DIR}/fault_rank.cc)
target_link_libraries(troika-test-fault-rank PRIVATE troika absl::strings absl::time)
troika_test(fault_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/fault_test.cc
  LIBS absl::strings absl::time TIMEOUT 300)
target_compile_definitions(fault_test PRIVATE
  TROIKARUN_BINARY="$<TARGET_FILE:troikarun>"
  COORDINATOR_BINARY="$<TARGET_FILE:troika-coordinator>"
  AGENT_BINARY="$<TARGET_FILE:troika-agent>"
  EXAMPLE_TRAIN_BINARY="$<TARGET_FILE:troika-example-train>"
  FAULT_RANK_BINARY="$<TARGET_FILE:troika-test-fault-rank>")
add_dependencies(fault_test troikarun troika-agent troika-coordinator troika-example-train
  troika-test-fault-rank)

# Two hosts from network namespaces (skips without the privilege to create them).
add_executable(troika-test-check-rank ${CMAKE_CURRENT_LIST_DIR}/check_rank.cc)
target_link_libraries(troika-test-check-rank PRIVATE troika)
troika_test(netns_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/netns_test.cc
  LIBS absl::strings absl::time TIMEOUT 180)
target_compile_definitions(netns_test PRIVATE
  COORDINATOR_BINARY="$<TARGET_FILE:troika-coordinator>"
  AGENT_BINARY="$<TARGET_FILE:troika-agent>"
  CHECK_RANK_BINARY="$<TARGET_FILE:troika-test-check-rank>"
  FAULT_RANK_BINARY="$<TARGET_FILE:troika-test-fault-rank>")
add_dependencies(netns_test troika-coordinator troika-agent troika-test-check-rank
  troika-test-fault-rank)

# troikarun across hosts over ssh: hosts from network namespaces, each with Debian's sshd
# (skips without root or openssh-server), a PyTorch job as users run it.
if(TROIKA_HAVE_PYTHON)
  troika_test(ssh_hosts_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/ssh_hosts_test.cc
    LIBS absl::strings absl::time TIMEOUT 600)
  target_compile_definitions(ssh_hosts_test PRIVATE
    TROIKARUN_BINARY="$<TARGET_FILE:troikarun>"
    PYTHON_EXECUTABLE="${TROIKA_PYTHON_EXECUTABLE}"
    PYTHON_DIR="${TROIKA_PYTHON_DIR}"
    ELASTIC_TRAIN_SCRIPT="${PROJECT_SOURCE_DIR}/examples/pytorch/elastic_train.py"
    CHAOS_JOB_SCRIPT="${PROJECT_SOURCE_DIR}/tests/python/chaos_job.py"
    CHECK_RANK_BINARY="$<TARGET_FILE:troika-test-check-rank>")
  add_dependencies(ssh_hosts_test troikarun troika-agent _troika troika-test-check-rank)
endif()

# User scenarios (tests/integration/scenarios.h) behind agents, launched by troikarun.
add_executable(troika-test-scenario-rank ${CMAKE_CURRENT_LIST_DIR}/scenario_rank.cc)
target_link_libraries(troika-test-scenario-rank PRIVATE troika absl::strings absl::time)
troika_test(scenario_process_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/scenario_process_test.cc
  LIBS absl::strings absl::time TIMEOUT 300)
target_compile_definitions(scenario_process_test PRIVATE
  TROIKARUN_BINARY="$<TARGET_FILE:troikarun>"
  SCENARIO_RANK_BINARY="$<TARGET_FILE:troika-test-scenario-rank>")
add_dependencies(scenario_process_test troikarun troika-agent troika-test-scenario-rank)

# Elastic jobs through troikarun and two agents (real processes; docs/elastic.md), and across
# a coordinator restart.
foreach(test elastic_test elastic_restart_test)
  troika_test(${test} SOURCES ${CMAKE_CURRENT_LIST_DIR}/${test}.cc
    LIBS absl::strings absl::time TIMEOUT 300)
  target_compile_definitions(${test} PRIVATE
    TROIKARUN_BINARY="$<TARGET_FILE:troikarun>"
    COORDINATOR_BINARY="$<TARGET_FILE:troika-coordinator>"
    AGENT_BINARY="$<TARGET_FILE:troika-agent>"
    EXAMPLE_ELASTIC_BINARY="$<TARGET_FILE:troika-example-elastic>")
  add_dependencies(${test} troikarun troika-agent troika-coordinator troika-example-elastic)
endforeach()

# A job formed anew after its ranks shut down (init -> shutdown -> init), through troikarun
# and through two agents (real processes; docs/agent.md).
add_executable(troika-test-reinit-rank ${CMAKE_CURRENT_LIST_DIR}/reinit_rank.cc)
target_link_libraries(troika-test-reinit-rank PRIVATE troika absl::strings absl::time)
troika_test(reinit_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/reinit_test.cc
  LIBS troika_coordinator absl::strings absl::time TIMEOUT 300)
target_compile_definitions(reinit_test PRIVATE
  TROIKARUN_BINARY="$<TARGET_FILE:troikarun>"
  AGENT_BINARY="$<TARGET_FILE:troika-agent>"
  REINIT_RANK_BINARY="$<TARGET_FILE:troika-test-reinit-rank>")
add_dependencies(reinit_test troikarun troika-agent troika-test-reinit-rank)

# The shared-memory data plane (TROIKA_TRANSPORT=shm) through troikarun (docs/shm.md).
troika_test(shm_data_plane_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/shm_data_plane_test.cc
  LIBS absl::strings absl::time TIMEOUT 180)
target_compile_definitions(shm_data_plane_test PRIVATE
  TROIKARUN_BINARY="$<TARGET_FILE:troikarun>"
  CHECK_RANK_BINARY="$<TARGET_FILE:troika-test-check-rank>")
add_dependencies(shm_data_plane_test troikarun troika-agent troika-test-check-rank)

# Suites that run every collective over the data plane: by default ("auto") that is shared
# memory, every rank being on this host (collectives_test's discovered tests, and the
# suites below), so no suite is run again over forced shm (the leak check below follows the
# process suites' discovered tests, which use it), and everything
# that moves bytes runs again over forced Gloo, which stays the data plane between hosts:
# process sets, join, groups, the cache, output buffers, faults and early exits. Left out
# over Gloo: suites of the control plane alone (attaches, job isolation, a thousand jobs,
# schedule deviations and order), which do not depend on the data plane.
add_test(NAME collectives_over_gloo COMMAND collectives_test
  "--gtest_filter=-LongLivedCoordinatorTest.*:AttachTest.*:JobIsolationTest.*:Kinds/ScheduleDeviationTest.*:ScheduleOrderTest.*")
set_tests_properties(collectives_over_gloo PROPERTIES
  ENVIRONMENT TROIKA_TEST_TRANSPORT=gloo TIMEOUT 600)
foreach(test scenario_process_test fault_test elastic_test)
  add_test(NAME ${test}_over_gloo COMMAND ${test})
  set_tests_properties(${test}_over_gloo PROPERTIES ENVIRONMENT TROIKA_TRANSPORT=gloo TIMEOUT 300)
endforeach()
troika_long_poles(collectives_over_gloo 196 elastic_test_over_gloo 84)
