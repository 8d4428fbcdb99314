# Installs trainprof to a prefix, then builds and runs an outside project that
# uses find_package(trainprof CONFIG REQUIRED) and trainprof::trainprof.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR}/consumer)
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
file(WRITE ${WORK_DIR}/consumer/CMakeLists.txt [=[
cmake_minimum_required(VERSION 3.25)
project(consumer CXX)
find_package(trainprof CONFIG REQUIRED)
add_executable(consumer main.cc)
target_link_libraries(consumer PRIVATE trainprof::trainprof)
]=])
file(WRITE ${WORK_DIR}/consumer/main.cc [=[
#include <trainprof/trainprof.h>
#include <cstdio>
int main(int argc, char** argv) {
  trainprof::ProfilerOptions o;
  o.output_path = argv[1];
  trainprof::Profiler prof(o);
  { TRAINPROF_RANGE("consumer"); }
  prof.stop();
  std::printf("%s %llu\n", std::string(trainprof::version()).c_str(),
              static_cast<unsigned long long>(prof.last_run().events_recorded));
  return prof.last_run().events_recorded == 2 ? 0 : 1;
}
]=])
set(extra_flags "")
if(SANITIZE)
  # A sanitized library needs a sanitized executable (runtime first).
  string(REPLACE ";" "," sanitizers "${SANITIZE}")
  set(extra_flags "-DCMAKE_CXX_FLAGS=-fsanitize=${sanitizers}" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${sanitizers}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${WORK_DIR}/consumer -B ${WORK_DIR}/consumer/build
                        -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix ${extra_flags}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer failed")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer/build RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed")
endif()
execute_process(COMMAND ${WORK_DIR}/consumer/build/consumer ${WORK_DIR}/out
                RESULT_VARIABLE rc OUTPUT_VARIABLE out)
message(STATUS "consumer printed: ${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the consumer failed: ${rc}")
endif()
