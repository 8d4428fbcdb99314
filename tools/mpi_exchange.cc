// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
#include "mpi_exchange.h"

#ifdef TRAINPROF_CLI_HAVE_MPI
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <vector>
#endif

namespace trainprof::cli {

#ifdef TRAINPROF_CLI_HAVE_MPI
namespace {

// MPI counts and offsets are ints: larger messages go in rounds, each
// moving at most this many bytes out of (and into) one process.
constexpr uint64_t kRoundBytes = uint64_t{1} << 30;

class MpiExchange final : public ClusterExchange {
 public:
  MpiExchange() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized == 0) {
      MPI_Init(nullptr, nullptr);
      owns_mpi_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &index_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiExchange() override {
    if (owns_mpi_) MPI_Finalize();
  }
  int index() const override { return index_; }
  int size() const override { return size_; }

  std::vector<std::string> all_to_all(std::vector<std::string> outgoing) override {
    auto n = static_cast<size_t>(size_);
    outgoing.resize(n);
    std::vector<uint64_t> send_sizes(n), receive_sizes(n);
    for (size_t p = 0; p < n; ++p) send_sizes[p] = outgoing[p].size();
    MPI_Alltoall(send_sizes.data(), 1, MPI_UINT64_T, receive_sizes.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
    uint64_t largest = 0;
    for (size_t p = 0; p < n; ++p) largest = std::max({largest, send_sizes[p], receive_sizes[p]});
    uint64_t everywhere = 0;
    MPI_Allreduce(&largest, &everywhere, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    std::vector<std::string> incoming(n);
    for (size_t p = 0; p < n; ++p) incoming[p].resize(receive_sizes[p]);
    std::vector<int> send_counts(n), send_offsets(n), receive_counts(n), receive_offsets(n);
    std::vector<char> send_buffer, receive_buffer;
    const uint64_t round = std::max<uint64_t>(1, kRoundBytes / n);  // to or from each process
    for (uint64_t done = 0; done < everywhere; done += round) {
      // This round's piece of each message, packed one after the other.
      send_buffer.clear();
      int at = 0;
      for (size_t p = 0; p < n; ++p) {
        uint64_t piece = send_sizes[p] > done ? std::min(round, send_sizes[p] - done) : 0;
        send_counts[p] = static_cast<int>(piece);
        send_offsets[p] = at;
        if (piece > 0)
          send_buffer.insert(send_buffer.end(), outgoing[p].data() + done, outgoing[p].data() + done + piece);
        at += static_cast<int>(piece);
      }
      at = 0;
      for (size_t p = 0; p < n; ++p) {
        uint64_t piece = receive_sizes[p] > done ? std::min(round, receive_sizes[p] - done) : 0;
        receive_counts[p] = static_cast<int>(piece);
        receive_offsets[p] = at;
        at += static_cast<int>(piece);
      }
      receive_buffer.resize(static_cast<size_t>(at));
      MPI_Alltoallv(send_buffer.data(), send_counts.data(), send_offsets.data(), MPI_BYTE,
                    receive_buffer.data(), receive_counts.data(), receive_offsets.data(), MPI_BYTE,
                    MPI_COMM_WORLD);
      for (size_t p = 0; p < n; ++p) {
        if (receive_counts[p] > 0)
          std::copy_n(receive_buffer.data() + receive_offsets[p], receive_counts[p],
                      incoming[p].data() + done);
      }
    }
    return incoming;
  }

 private:
  int index_ = 0;
  int size_ = 1;
  bool owns_mpi_ = false;
};

}  // namespace

std::unique_ptr<ClusterExchange> make_mpi_exchange(std::string*) {
  return std::make_unique<MpiExchange>();
}
bool mpi_exchange_built() {
  return true;
}
#else
bool mpi_exchange_built() {
  return false;
}
std::unique_ptr<ClusterExchange> make_mpi_exchange(std::string* error) {
  *error = "this trainprof was built without MPI (Debian: libopenmpi-dev); --mpi needs it";
  return nullptr;
}
#endif

}  // namespace trainprof::cli
