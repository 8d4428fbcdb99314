# Installs trainprof to a prefix, then configures, builds and runs an outside
# project per installed component, the way a user would: find_package(trainprof
# CONFIG REQUIRED) and one target_link_libraries line, no other find_package.
#   COMPONENTS: trainprof, and torch and mpi where they were built.
# Each consumer is a C++-only project (project(... CXX)): the package must bring
# everything its targets need (LibTorch, MPI's headers and library).
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()

# trainprof::trainprof: one range in a profile, two events (its begin and end).
set(main_trainprof [=[
#include <trainprof/trainprof.h>
#include <cstdio>
int main(int argc, char** argv) {
  trainprof::ProfilerOptions o;
  o.output_path = argv[1];
  trainprof::Profiler prof(o);
  { TRAINPROF_RANGE("consumer"); }
  prof.stop();
  unsigned long long events = prof.last_run().events_recorded;
  std::printf("trainprof %s: %llu events\n", std::string(trainprof::version()).c_str(), events);
  return events == 2 ? 0 : 1;
}
]=])

# trainprof::torch: linking it is enough for LibTorch operators to be recorded:
# a matrix product adds its operator's events to the range's two.
set(main_torch [=[
#include <ATen/ATen.h>
#include <trainprof/trainprof.h>
#include <cstdio>
int main(int argc, char** argv) {
  trainprof::ProfilerOptions o;
  o.output_path = argv[1];
  trainprof::Profiler prof(o);
  {
    TRAINPROF_RANGE("consumer");
    at::Tensor a = at::ones({4, 4});
    (void)at::mm(a, a);
  }
  prof.stop();
  unsigned long long events = prof.last_run().events_recorded;
  std::printf("trainprof::torch: %llu events\n", events);
  return events > 2 ? 0 : 1;
}
]=])

# trainprof::mpi: an MPI program (mpi.h from the package's trainprof::mpi_c)
# whose MPI calls reach trainprof through PMPI: the barrier adds events.
set(main_mpi [=[
#include <mpi.h>
#include <trainprof/trainprof.h>
#include <cstdio>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  trainprof::ProfilerOptions o;
  o.output_path = argv[1];
  trainprof::Profiler prof(o);
  {
    TRAINPROF_RANGE("consumer");
    MPI_Barrier(MPI_COMM_WORLD);
  }
  prof.stop();
  unsigned long long events = prof.last_run().events_recorded;
  std::printf("trainprof::mpi: %llu events\n", events);
  MPI_Finalize();
  return events > 2 ? 0 : 1;
}
]=])

set(extra_flags "")
if(SANITIZE)
  # A sanitized library needs a sanitized executable (runtime first).
  string(REPLACE ";" "," sanitizers "${SANITIZE}")
  set(extra_flags "-DCMAKE_CXX_FLAGS=-fsanitize=${sanitizers}" "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${sanitizers}")
endif()

foreach(component IN LISTS COMPONENTS)
  set(dir ${WORK_DIR}/consumer_${component})
  file(MAKE_DIRECTORY ${dir})
  file(WRITE ${dir}/CMakeLists.txt "cmake_minimum_required(VERSION 3.25)
project(consumer_${component} CXX)
find_package(trainprof CONFIG REQUIRED)
add_executable(consumer main.cc)
target_link_libraries(consumer PRIVATE trainprof::${component})
")
  file(WRITE ${dir}/main.cc "${main_${component}}")
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${dir} -B ${dir}/build -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                          ${extra_flags}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "configuring the consumer of trainprof::${component} failed:\n${out}\n${err}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${dir}/build RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "building the consumer of trainprof::${component} failed:\n${out}\n${err}")
  endif()
  # OpenMPI runs a program started without mpirun as a one-rank job.
  execute_process(COMMAND ${dir}/build/consumer ${dir}/out RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  message(STATUS "consumer of trainprof::${component} printed: ${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the consumer of trainprof::${component} failed (${rc}):\n${out}\n${err}")
  endif()
endforeach()
