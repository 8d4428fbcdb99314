// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// libtrainprof_mpi: MPI calls through the PMPI profiling interface.
//
// Linked into an MPI program (or LD_PRELOADed) this library defines the MPI_*
// functions below; each calls the real PMPI_* function and, while a run
// records, writes one COMM event (docs/FORMAT.md): the operation, its
// duration, the bytes it moves for this rank, its peer or root as a world
// rank, and its group (communicator) with a sequence number. Collectives on a
// communicator are called in the same order by all its members (MPI requires
// it), so counting them from the communicator's creation, whether or not a
// run records, numbers the same collective identically on every rank: the
// cluster analysis matches them by (group, sequence).
//
// Communicators get their state through MPI's attribute caching (a keyval
// whose delete callback frees it), created at MPI_Init for MPI_COMM_WORLD, at
// each MPI_Comm_split / dup / create / split_type for the new one, or when a
// communicator made elsewhere is first used. A group's name is the same on
// every member: a hash of its members' world ranks and of how many groups of
// these members this process made before (members create communicators in
// the same order).
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/log.h"
#include "base/run_directory.h"
#include "core/clock.h"
#include "core/clock_sync.h"
#include "core/collector.h"
#include "core/comm_progress.h"
#include "core/event.h"
#include "core/intern.h"
#include "core/recorder.h"
#include "raw/format.h"
#include "trainprof/range.h"

namespace trainprof::mpi {
namespace {

constexpr uint8_t kCollective = raw::kCommCollective;
constexpr uint8_t kSend = raw::kCommSend;
constexpr uint8_t kRecv = raw::kCommRecv;
constexpr uint8_t kNonblocking = raw::kCommNonblocking;
constexpr uint8_t kCompletion = raw::kCommCompletion;
constexpr uint8_t kWait = raw::kCommWait;
constexpr uint8_t kManagement = raw::kCommManagement;

// ---- Communicators ----

struct CommState {
  const char* group = nullptr;        // interned group name
  const char* record = nullptr;       // interned COMM_GROUP name ("group\x1franks\x1forigin")
  std::vector<int> world_ranks;       // by rank in the communicator
  std::atomic<uint32_t> sequence{0};  // collectives called so far
};

std::mutex g_mutex;                                // guards the three below
std::vector<CommState*> g_live;                    // for the group records of a run that starts later
std::unordered_map<std::string, uint32_t> g_made;  // groups made per member list
int g_keyval = MPI_KEYVAL_INVALID;
std::atomic<bool> g_ready{false};  // MPI initialized and the keyval created
std::atomic<bool> g_finalized{false};

uint64_t fnv1a(std::string_view text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

void record_group(const CommState& s) {
  if (!detail::host_recording()) return;
  core::record_event_fields(detail::now_ticks(), 0, s.record,
                            static_cast<uint8_t>(raw::EventKind::kCommGroup), 0, 0, 0);
}

// Bumped when a communicator's state is deleted: a thread's cached lookup
// (state_of) is then stale, since a freed handle may come back for another.
std::atomic<uint64_t> g_states_deleted{0};

int delete_state(MPI_Comm, int, void* attribute, void*) {
  auto* s = static_cast<CommState*>(attribute);
  g_states_deleted.fetch_add(1, std::memory_order_release);
  {
    std::lock_guard lock(g_mutex);
    std::erase(g_live, s);
  }
  delete s;
  return MPI_SUCCESS;
}

// The world ranks of `comm`'s members, in its rank order.
std::vector<int> world_ranks_of(MPI_Comm comm) {
  int size = 0;
  if (PMPI_Comm_size(comm, &size) != MPI_SUCCESS || size <= 0) return {};
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  std::vector<int> local(static_cast<size_t>(size)), ranks(static_cast<size_t>(size), -1);
  for (int i = 0; i < size; ++i) local[static_cast<size_t>(i)] = i;
  if (PMPI_Comm_group(comm, &group) == MPI_SUCCESS &&
      PMPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS) {
    PMPI_Group_translate_ranks(group, size, local.data(), world, ranks.data());
  }
  if (group != MPI_GROUP_NULL) PMPI_Group_free(&group);
  if (world != MPI_GROUP_NULL) PMPI_Group_free(&world);
  return ranks;
}

CommState* make_state(MPI_Comm comm, const char* origin) {
  auto* s = new CommState();
  s->world_ranks = world_ranks_of(comm);
  std::string members;
  for (int r : s->world_ranks) {
    if (!members.empty()) members += ',';
    members += std::to_string(r);
  }
  uint32_t made;
  {
    std::lock_guard lock(g_mutex);
    made = g_made[members]++;
  }
  std::string name = std::to_string(fnv1a(members + "#" + std::to_string(made)));
  s->group = detail::intern(name);
  s->record = detail::intern(name + raw::kCommGroupSeparator + members + raw::kCommGroupSeparator + origin);
  if (PMPI_Comm_set_attr(comm, g_keyval, s) != MPI_SUCCESS) {
    delete s;
    return nullptr;
  }
  {
    std::lock_guard lock(g_mutex);
    g_live.push_back(s);
  }
  record_group(*s);
  return s;
}

// After MPI_Init (ours or, when this library came later, anyone's): the
// keyval, MPI_COMM_WORLD's group and the process' rank.
bool set_up() {
  if (g_ready.load(std::memory_order_acquire)) return true;
  if (g_finalized.load(std::memory_order_relaxed)) return false;
  int initialized = 0, finalized = 0;
  if (PMPI_Initialized(&initialized) != MPI_SUCCESS || !initialized) return false;
  if (PMPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return false;
  static std::once_flag once;
  std::call_once(once, [] {
    if (PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_state, &g_keyval, nullptr) != MPI_SUCCESS) {
      base::log_error("MPI collector: cannot create its communicator attribute; MPI calls are not recorded");
      return;
    }
    int rank = 0, size = 1;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    detail::set_runtime_rank(rank, size, "MPI");
    g_ready.store(true, std::memory_order_release);
    make_state(MPI_COMM_WORLD, "MPI_COMM_WORLD");
  });
  return g_ready.load(std::memory_order_acquire);
}

bool ready() noexcept {
  try {
    return set_up();
  } catch (...) {
    return g_ready.load(std::memory_order_acquire);
  }
}

// Never throws into the MPI program: a communicator whose state cannot be
// made is not followed.
// The last lookup of this thread: OpenMPI's attribute lookup takes a lock
// and a hash probe (about 200 ns), more than the rest of a wrapper.
struct LastLookup {
  MPI_Comm comm = MPI_COMM_NULL;
  CommState* state = nullptr;
  uint64_t deleted = 0;
};
thread_local LastLookup t_last;

CommState* state_of(MPI_Comm comm) noexcept {
  try {
    if (comm == MPI_COMM_NULL || !ready()) return nullptr;
    uint64_t deleted = g_states_deleted.load(std::memory_order_acquire);
    if (t_last.comm == comm && t_last.deleted == deleted && t_last.state != nullptr) return t_last.state;
    void* attribute = nullptr;
    int found = 0;
    if (PMPI_Comm_get_attr(comm, g_keyval, &attribute, &found) == MPI_SUCCESS && found) {
      t_last = LastLookup{comm, static_cast<CommState*>(attribute), deleted};
      return t_last.state;
    }
    int inter = 0;
    if (PMPI_Comm_test_inter(comm, &inter) == MPI_SUCCESS && inter) return nullptr;  // not followed
    return make_state(comm, "first use");
  } catch (...) {
    return nullptr;
  }
}

// make_state for a communicator just made (MPI_Comm_split, ...).
void follow(MPI_Comm comm, const char* origin) noexcept {
  try {
    if (comm != MPI_COMM_NULL && ready()) make_state(comm, origin);
  } catch (...) {
  }
}

int world_rank(const CommState* s, int rank) {
  if (s == nullptr || rank < 0 || static_cast<size_t>(rank) >= s->world_ranks.size()) return -1;
  return s->world_ranks[static_cast<size_t>(rank)];
}

// ---- Clock alignment ----
//
// At MPI_Init and at MPI_Finalize (both collective, so every rank is there)
// rank 0 exchanges kSyncRounds ping-pongs with each other rank in turn on a
// communicator of its own: rank 0 sends, the other reads its wall clock and
// answers with it, rank 0 notes the round trip. With the shortest round
// trip, the other clock was read at rank 0's mid-point within +- half of
// it: that is the offset and its error bound, which rank 0 then sends back.
constexpr int kSyncRounds = 10;
MPI_Comm g_sync_comm = MPI_COMM_NULL;

void sync_clocks() noexcept {
  try {
    if (g_sync_comm == MPI_COMM_NULL) return;
    int rank = 0, size = 1;
    PMPI_Comm_rank(g_sync_comm, &rank);
    PMPI_Comm_size(g_sync_comm, &size);
    if (rank == 0) {
      for (int peer = 1; peer < size; ++peer) {
        int64_t best[3] = {INT64_MAX, 0, 0};  // round trip, offset, when (the peer's clock)
        for (int round = 0; round < kSyncRounds; ++round) {
          int64_t t0 = static_cast<int64_t>(detail::realtime_now_ns());
          int64_t theirs = 0;
          PMPI_Send(&t0, 1, MPI_INT64_T, peer, 1, g_sync_comm);
          PMPI_Recv(&theirs, 1, MPI_INT64_T, peer, 2, g_sync_comm, MPI_STATUS_IGNORE);
          int64_t t1 = static_cast<int64_t>(detail::realtime_now_ns());
          if (t1 - t0 < best[0]) best[0] = t1 - t0, best[1] = theirs - (t0 + (t1 - t0) / 2), best[2] = theirs;
        }
        int64_t result[3] = {best[1], best[0] / 2 + 1, best[2]};  // offset, error bound, when
        PMPI_Send(result, 3, MPI_INT64_T, peer, 3, g_sync_comm);
      }
      detail::add_clock_sync_point(0, detail::ClockSyncPoint{detail::realtime_now_ns(), 0, 0});
    } else {
      for (int round = 0; round < kSyncRounds; ++round) {
        int64_t ping = 0;
        PMPI_Recv(&ping, 1, MPI_INT64_T, 0, 1, g_sync_comm, MPI_STATUS_IGNORE);
        int64_t now = static_cast<int64_t>(detail::realtime_now_ns());
        PMPI_Send(&now, 1, MPI_INT64_T, 0, 2, g_sync_comm);
      }
      int64_t result[3] = {0, 0, 0};
      PMPI_Recv(result, 3, MPI_INT64_T, 0, 3, g_sync_comm, MPI_STATUS_IGNORE);
      // {offset, error bound, when}: the measurement, on this rank's clock.
      detail::add_clock_sync_point(
          0, detail::ClockSyncPoint{static_cast<uint64_t>(result[2]), result[0],
                                    static_cast<uint64_t>(std::max<int64_t>(result[1], 0))});
    }
  } catch (...) {
  }
}

// ---- Sizes ----

uint64_t type_bytes(int count, MPI_Datatype type) {
  int size = 0;
  if (count <= 0 || type == MPI_DATATYPE_NULL || PMPI_Type_size(type, &size) != MPI_SUCCESS || size < 0)
    return 0;
  return static_cast<uint64_t>(count) * static_cast<uint64_t>(size);
}

uint64_t summed_bytes(const int* counts, MPI_Comm comm, MPI_Datatype type) {
  int size = 0;
  if (counts == nullptr || PMPI_Comm_size(comm, &size) != MPI_SUCCESS) return 0;
  uint64_t total = 0;
  for (int i = 0; i < size; ++i) total += type_bytes(counts[i], type);
  return total;
}

int comm_rank(MPI_Comm comm);
int comm_size(MPI_Comm comm);

// Gathers: what this rank contributes (in place: its share of the receive buffer).
uint64_t gathered_bytes(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int recvcount,
                        MPI_Datatype recvtype) {
  return sendbuf == MPI_IN_PLACE ? type_bytes(recvcount, recvtype) : type_bytes(sendcount, sendtype);
}
uint64_t gathered_v_bytes(const void* sendbuf, int sendcount, MPI_Datatype sendtype, const int* recvcounts,
                          MPI_Datatype recvtype, MPI_Comm comm) {
  if (sendbuf != MPI_IN_PLACE) return type_bytes(sendcount, sendtype);
  int me = comm_rank(comm);
  return me >= 0 && recvcounts != nullptr ? type_bytes(recvcounts[me], recvtype) : 0;
}
// Scatters: what this rank receives (the root in place: its share).
uint64_t scattered_bytes(const void* recvbuf, int sendcount, MPI_Datatype sendtype, int recvcount,
                         MPI_Datatype recvtype) {
  return recvbuf == MPI_IN_PLACE ? type_bytes(sendcount, sendtype) : type_bytes(recvcount, recvtype);
}
uint64_t scattered_v_bytes(const void* recvbuf, const int* sendcounts, MPI_Datatype sendtype, int recvcount,
                           MPI_Datatype recvtype, MPI_Comm comm) {
  if (recvbuf != MPI_IN_PLACE) return type_bytes(recvcount, recvtype);
  int me = comm_rank(comm);
  return me >= 0 && sendcounts != nullptr ? type_bytes(sendcounts[me], sendtype) : 0;
}
// All-to-all: what this rank sends to all (in place: the receive side's).
uint64_t alltoall_bytes(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int recvcount,
                        MPI_Datatype recvtype, MPI_Comm comm) {
  return gathered_bytes(sendbuf, sendcount, sendtype, recvcount, recvtype) *
         static_cast<uint64_t>(comm_size(comm));
}
uint64_t alltoallv_bytes(const void* sendbuf, const int* sendcounts, MPI_Datatype sendtype,
                         const int* recvcounts, MPI_Datatype recvtype, MPI_Comm comm) {
  return sendbuf == MPI_IN_PLACE ? summed_bytes(recvcounts, comm, recvtype)
                                 : summed_bytes(sendcounts, comm, sendtype);
}

int comm_size(MPI_Comm comm) {
  int size = 0;
  return PMPI_Comm_size(comm, &size) == MPI_SUCCESS ? size : 0;
}

int comm_rank(MPI_Comm comm) {
  int rank = -1;
  return PMPI_Comm_rank(comm, &rank) == MPI_SUCCESS ? rank : -1;
}

// ---- Nonblocking operations, from post to completion ----

struct Pending {
  const char* name;
  uint8_t flags;
  uint32_t sequence;
  uint64_t bytes;
  const char* group;
  int peer;
  int tag;
  uint64_t post_ticks;
  MPI_Datatype recv_type;  // a receive's: its size comes from the status
  const CommState* state;  // a receive's, for the status' source
};

std::mutex g_pending_mutex;
std::unordered_map<MPI_Request, Pending> g_pending;

void remember(MPI_Request request, const Pending& p) noexcept {
  if (request == MPI_REQUEST_NULL) return;
  try {
    std::lock_guard lock(g_pending_mutex);
    g_pending[request] = p;
  } catch (...) {  // not remembered: its completion is not recorded
  }
}

// The operation of `request` completed at `end_ticks`, with `status`
// (nullptr: none).
void complete(MPI_Request request, uint64_t end_ticks, const MPI_Status* status) noexcept {
  if (request == MPI_REQUEST_NULL) return;
  Pending p;
  try {
    std::lock_guard lock(g_pending_mutex);
    auto it = g_pending.find(request);
    if (it == g_pending.end()) return;
    p = it->second;
    g_pending.erase(it);
  } catch (...) {
    return;
  }
  if ((p.flags & kRecv) && status != nullptr && p.recv_type != MPI_DATATYPE_NULL) {
    int count = 0;
    if (PMPI_Get_count(status, p.recv_type, &count) == MPI_SUCCESS && count != MPI_UNDEFINED) {
      p.bytes = type_bytes(count, p.recv_type);
    }
    if (status->MPI_SOURCE >= 0) p.peer = world_rank(p.state, status->MPI_SOURCE);
    p.tag = status->MPI_TAG;
  }
  if (end_ticks == 0 || !detail::host_recording()) return;  // the wait began before the run
  uint8_t flags = static_cast<uint8_t>((p.flags & ~kNonblocking) | kCompletion);
  core::record_comm(p.post_ticks, end_ticks, p.name, flags, p.sequence, p.bytes, p.group, p.peer, p.tag);
}

void forget(MPI_Request request) noexcept {
  try {
    std::lock_guard lock(g_pending_mutex);
    g_pending.erase(request);
  } catch (...) {
  }
}

// ---- One call ----

// A call's start: the clock only while a run records (0 otherwise; such a
// call is not recorded even when a run starts before it returns).
inline uint64_t start_ticks() noexcept {
  return detail::host_recording() ? detail::now_ticks() : 0;
}

// A collective: its sequence number is taken before the call, whether or
// not a run records, so that it counts every collective of the group.
class Collective {
 public:
  // The clock is read only while a run records (0: it did not at the start).
  // `name` is the call's (a literal); the flight recorder's hang report
  // learns from it which collective a rank entered and never left.
  Collective(MPI_Comm comm, const char* name) : state_(state_of(comm)), t0_(start_ticks()) {
    sequence_ = state_ != nullptr ? state_->sequence.fetch_add(1, std::memory_order_relaxed)
                                  : core::kNoSequenceNumber;
    group_ = state_ != nullptr ? state_->group : nullptr;
    if (group_ != nullptr) core::collective_entered(group_, sequence_, name);
  }

  template <typename Bytes>
  void done(const char* name, uint8_t flags, Bytes bytes, int root, MPI_Request* request = nullptr) const {
    if (group_ != nullptr) core::collective_returned(group_, sequence_);
    if (t0_ == 0 || !detail::host_recording()) return;
    uint64_t end = detail::now_ticks();
    uint64_t size = bytes();
    int peer = world_rank(state_, root);  // root < 0 (MPI_Comm_free's freed state) is not looked up
    core::record_comm(t0_, end, name, static_cast<uint8_t>(kCollective | flags), sequence_, size, group_,
                      peer, -1);
    if (request != nullptr) {
      remember(*request, Pending{name, kCollective, sequence_, size, group_, peer, -1, t0_, MPI_DATATYPE_NULL,
                                 nullptr});
    }
  }

 private:
  CommState* state_;
  const char* group_;  // interned: outlives the state
  uint64_t t0_;
  uint32_t sequence_;
};

// A point-to-point call (the communicator's state only while recording).
void point_to_point(uint64_t t0, const char* name, uint8_t flags, uint64_t bytes, MPI_Comm comm,
                    int peer_rank, int tag, MPI_Request* request = nullptr,
                    MPI_Datatype recv_type = MPI_DATATYPE_NULL) {
  if (!detail::host_recording()) return;
  uint64_t end = detail::now_ticks();
  const CommState* s = state_of(comm);
  int peer = world_rank(s, peer_rank);
  const char* group = s != nullptr ? s->group : nullptr;
  core::record_comm(t0, end, name, flags, core::kNoSequenceNumber, bytes, group, peer, tag);
  if (request != nullptr) {
    remember(*request,
             Pending{name, flags, core::kNoSequenceNumber, bytes, group, peer, tag, t0, recv_type, s});
  }
}

void wait_call(uint64_t t0, uint64_t end, const char* name) {
  if (t0 == 0 || !detail::host_recording()) return;
  core::record_comm(t0, end, name, kWait, core::kNoSequenceNumber, 0, nullptr, -1, -1);
}

// Copies of the request handles a wait or test is given (it nulls the
// completed ones), on the stack for the usual few.
class RequestCopy {
 public:
  RequestCopy(int count, const MPI_Request* requests) {
    size_t n = count > 0 && requests != nullptr ? static_cast<size_t>(count) : 0;
    try {
      data_ = n <= kInline ? inline_ : (heap_.resize(n), heap_.data());
    } catch (...) {  // no memory: these completions are not recorded
      n = 0;
      data_ = inline_;
    }
    std::copy(requests, requests + n, data_);
    size_ = n;
  }
  MPI_Request operator[](int i) const {
    return i >= 0 && static_cast<size_t>(i) < size_ ? data_[i] : MPI_REQUEST_NULL;
  }
  size_t size() const { return size_; }

 private:
  static constexpr size_t kInline = 16;
  MPI_Request inline_[kInline];
  std::vector<MPI_Request> heap_;
  MPI_Request* data_;
  size_t size_ = 0;
};

// A status to read completions from when the caller ignores them.
class StatusArray {
 public:
  StatusArray(int count, MPI_Status* given) {
    if (given != MPI_STATUSES_IGNORE || count <= 0) {
      data_ = given;
      return;
    }
    try {
      local_.resize(static_cast<size_t>(count));
      data_ = local_.data();
    } catch (...) {
      data_ = given;  // no memory: receives keep their posted size
    }
  }
  MPI_Status* get() const { return data_; }
  const MPI_Status* at(int i) const { return data_ != MPI_STATUSES_IGNORE ? &data_[i] : nullptr; }

 private:
  std::vector<MPI_Status> local_;
  MPI_Status* data_;
};

// Every rank passes here: the layer's communicator for the clock alignment
// is made, and the first alignment taken.
void after_init() noexcept {
  if (!ready()) return;
  if (PMPI_Comm_dup(MPI_COMM_WORLD, &g_sync_comm) != MPI_SUCCESS) {
    g_sync_comm = MPI_COMM_NULL;
    base::log_warning("MPI collector: cannot make its communicator; ranks' clocks are not aligned");
    return;
  }
  sync_clocks();
}

// ---- Run starts ----

class MpiCollector final : public core::Collector {
 public:
  std::string_view name() const override { return "mpi"; }
  // Every live group, so that a run that starts after the communicators
  // were made still names them.
  void start(const ProfilerOptions&) noexcept override {
    try {
      std::lock_guard lock(g_mutex);
      for (const CommState* s : g_live) record_group(*s);
    } catch (...) {
    }
  }
  void stop() noexcept override {}
};

__attribute__((constructor)) void register_mpi_collector() {
  static auto* collector = new MpiCollector();  // lives as long as the process
  core::register_collector(collector);
}

}  // namespace
}  // namespace trainprof::mpi

// ---- The MPI functions ----
//
// Each returns what its PMPI_ call returned; nothing here throws or changes
// an argument the caller sees.
using namespace trainprof::mpi;  // NOLINT: the wrappers below are C functions
using trainprof::detail::now_ticks;

extern "C" {

int MPI_Init(int* argc, char*** argv) {
  int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) after_init();
  return rc;
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) after_init();
  return rc;
}

// The second alignment (the drift between the two is interpolated).
int MPI_Finalize(void) {
  if (g_sync_comm != MPI_COMM_NULL) {
    sync_clocks();
    PMPI_Comm_free(&g_sync_comm);
  }
  g_finalized.store(true, std::memory_order_relaxed);
  return PMPI_Finalize();
}

// Collectives.

// The collectives, each blocking and nonblocking: one row makes both
// wrappers. A row: the two names, the parameters (the nonblocking one adds
// `MPI_Request* request`), the arguments PMPI_ takes, the bytes the call
// moves, and its root (-1: none). Reduce-scatter moves the bytes of the
// whole reduced vector (what each rank contributes).
#define TRAINPROF_MPI_COLLECTIVES(X)                                                                         \
  X(Barrier, Ibarrier, (MPI_Comm comm), (comm), uint64_t{0}, -1)                                             \
  X(Bcast, Ibcast, (void* buffer, int count, MPI_Datatype type, int root, MPI_Comm comm),                    \
    (buffer, count, type, root, comm), type_bytes(count, type), root)                                        \
  X(Allreduce, Iallreduce,                                                                                   \
    (const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm),            \
    (sendbuf, recvbuf, count, type, op, comm), type_bytes(count, type), -1)                                  \
  X(Reduce, Ireduce,                                                                                         \
    (const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root, MPI_Comm comm),  \
    (sendbuf, recvbuf, count, type, op, root, comm), type_bytes(count, type), root)                          \
  X(Allgather, Iallgather,                                                                                   \
    (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,                \
     MPI_Datatype recvtype, MPI_Comm comm),                                                                  \
    (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm),                                      \
    gathered_bytes(sendbuf, sendcount, sendtype, recvcount, recvtype), -1)                                   \
  X(Allgatherv, Iallgatherv,                                                                                 \
    (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],       \
     const int displs[], MPI_Datatype recvtype, MPI_Comm comm),                                              \
    (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm),                             \
    gathered_v_bytes(sendbuf, sendcount, sendtype, recvcounts, recvtype, comm), -1)                          \
  X(Gather, Igather,                                                                                         \
    (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,                \
     MPI_Datatype recvtype, int root, MPI_Comm comm),                                                        \
    (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm),                                \
    gathered_bytes(sendbuf, sendcount, sendtype, recvcount, recvtype), root)                                 \
  X(Gatherv, Igatherv,                                                                                       \
    (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],       \
     const int displs[], MPI_Datatype recvtype, int root, MPI_Comm comm),                                    \
    (sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm),                       \
    gathered_v_bytes(sendbuf, sendcount, sendtype, recvcounts, recvtype, comm), root)                        \
  X(Scatter, Iscatter,                                                                                       \
    (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,                \
     MPI_Datatype recvtype, int root, MPI_Comm comm),                                                        \
    (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm),                                \
    scattered_bytes(recvbuf, sendcount, sendtype, recvcount, recvtype), root)                                \
  X(Scatterv, Iscatterv,                                                                                     \
    (const void* sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype, void* recvbuf,  \
     int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm),                                         \
    (sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm),                       \
    scattered_v_bytes(recvbuf, sendcounts, sendtype, recvcount, recvtype, comm), root)                       \
  X(Alltoall, Ialltoall,                                                                                     \
    (const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,                \
     MPI_Datatype recvtype, MPI_Comm comm),                                                                  \
    (sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm),                                      \
    alltoall_bytes(sendbuf, sendcount, sendtype, recvcount, recvtype, comm), -1)                             \
  X(Alltoallv, Ialltoallv,                                                                                   \
    (const void* sendbuf, const int sendcounts[], const int sdispls[], MPI_Datatype sendtype, void* recvbuf, \
     const int recvcounts[], const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm),                     \
    (sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm),                  \
    alltoallv_bytes(sendbuf, sendcounts, sendtype, recvcounts, recvtype, comm), -1)                          \
  X(Reduce_scatter, Ireduce_scatter,                                                                         \
    (const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype type, MPI_Op op,               \
     MPI_Comm comm),                                                                                         \
    (sendbuf, recvbuf, recvcounts, type, op, comm), summed_bytes(recvcounts, comm, type), -1)                \
  X(Reduce_scatter_block, Ireduce_scatter_block,                                                             \
    (const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type, MPI_Op op, MPI_Comm comm),        \
    (sendbuf, recvbuf, recvcount, type, op, comm),                                                           \
    type_bytes(recvcount, type) * static_cast<uint64_t>(comm_size(comm)), -1)

#define TRAINPROF_UNPARENTHESIZED(...) __VA_ARGS__
#define TRAINPROF_MPI_COLLECTIVE_WRAPPERS(name, iname, params, args, bytes, root) \
  int MPI_##name(TRAINPROF_UNPARENTHESIZED params) {                              \
    Collective c(comm, "MPI_" #name);                                             \
    int rc = PMPI_##name(TRAINPROF_UNPARENTHESIZED args);                         \
    c.done(                                                                       \
        "MPI_" #name, 0, [&] { return bytes; }, root);                            \
    return rc;                                                                    \
  }                                                                               \
  int MPI_##iname(TRAINPROF_UNPARENTHESIZED params, MPI_Request* request) {       \
    Collective c(comm, "MPI_" #iname);                                            \
    int rc = PMPI_##iname(TRAINPROF_UNPARENTHESIZED args, request);               \
    c.done(                                                                       \
        "MPI_" #iname, kNonblocking, [&] { return bytes; }, root, request);       \
    return rc;                                                                    \
  }

TRAINPROF_MPI_COLLECTIVES(TRAINPROF_MPI_COLLECTIVE_WRAPPERS)

#undef TRAINPROF_MPI_COLLECTIVE_WRAPPERS
#undef TRAINPROF_UNPARENTHESIZED
#undef TRAINPROF_MPI_COLLECTIVES

// Point-to-point.

int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  uint64_t t0 = start_ticks();
  int rc = PMPI_Send(buf, count, type, dest, tag, comm);
  point_to_point(t0, "MPI_Send", kSend, type_bytes(count, type), comm, dest, tag);
  return rc;
}

int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
              MPI_Request* request) {
  uint64_t t0 = start_ticks();
  int rc = PMPI_Isend(buf, count, type, dest, tag, comm, request);
  point_to_point(t0, "MPI_Isend", kSend | kNonblocking, type_bytes(count, type), comm, dest, tag, request);
  return rc;
}

// A receive's bytes, source and tag are what arrived (the status).
int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
             MPI_Status* status) {
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  uint64_t t0 = start_ticks();
  int rc = PMPI_Recv(buf, count, type, source, tag, comm, st);
  if (t0 != 0 && trainprof::detail::host_recording()) {
    int received = 0;
    uint64_t bytes = PMPI_Get_count(st, type, &received) == MPI_SUCCESS && received != MPI_UNDEFINED
                         ? type_bytes(received, type)
                         : 0;
    point_to_point(t0, "MPI_Recv", kRecv, bytes, comm, rc == MPI_SUCCESS ? st->MPI_SOURCE : source,
                   rc == MPI_SUCCESS ? st->MPI_TAG : tag);
  }
  return rc;
}

int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
              MPI_Request* request) {
  uint64_t t0 = start_ticks();
  int rc = PMPI_Irecv(buf, count, type, source, tag, comm, request);
  point_to_point(t0, "MPI_Irecv", kRecv | kNonblocking, type_bytes(count, type), comm, source, tag, request,
                 type);
  return rc;
}

// Two records of one call: the send part and the receive part.
int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag, MPI_Comm comm,
                 MPI_Status* status) {
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  uint64_t t0 = start_ticks();
  int rc = PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source,
                         recvtag, comm, st);
  if (t0 != 0 && trainprof::detail::host_recording()) {
    point_to_point(t0, "MPI_Sendrecv", kSend, type_bytes(sendcount, sendtype), comm, dest, sendtag);
    int received = 0;
    uint64_t bytes = PMPI_Get_count(st, recvtype, &received) == MPI_SUCCESS && received != MPI_UNDEFINED
                         ? type_bytes(received, recvtype)
                         : 0;
    point_to_point(t0, "MPI_Sendrecv", kRecv, bytes, comm, rc == MPI_SUCCESS ? st->MPI_SOURCE : source,
                   rc == MPI_SUCCESS ? st->MPI_TAG : recvtag);
  }
  return rc;
}

// Completion. A wait is recorded as such, and each nonblocking operation it
// completes as one record from its post to this completion.

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  MPI_Request handle = request != nullptr ? *request : MPI_REQUEST_NULL;
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  uint64_t t0 = start_ticks();
  int rc = PMPI_Wait(request, st);
  uint64_t end = t0 != 0 ? now_ticks() : 0;
  wait_call(t0, end, "MPI_Wait");
  complete(handle, end, rc == MPI_SUCCESS ? st : nullptr);
  return rc;
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  RequestCopy handles(count, requests);
  StatusArray st(count, statuses);
  uint64_t t0 = start_ticks();
  int rc = PMPI_Waitall(count, requests, st.get());
  uint64_t end = t0 != 0 ? now_ticks() : 0;
  wait_call(t0, end, "MPI_Waitall");
  for (int i = 0; i < static_cast<int>(handles.size()); ++i)
    complete(handles[i], end, rc == MPI_SUCCESS ? st.at(i) : nullptr);
  return rc;
}

int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  RequestCopy handles(count, requests);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  uint64_t t0 = start_ticks();
  int rc = PMPI_Waitany(count, requests, index, st);
  uint64_t end = t0 != 0 ? now_ticks() : 0;
  wait_call(t0, end, "MPI_Waitany");
  if (rc == MPI_SUCCESS && index != nullptr && *index != MPI_UNDEFINED) complete(handles[*index], end, st);
  return rc;
}

int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) {
  RequestCopy handles(incount, requests);
  StatusArray st(incount, statuses);
  uint64_t t0 = start_ticks();
  int rc = PMPI_Waitsome(incount, requests, outcount, indices, st.get());
  uint64_t end = t0 != 0 ? now_ticks() : 0;
  wait_call(t0, end, "MPI_Waitsome");
  if (rc == MPI_SUCCESS && outcount != nullptr && *outcount != MPI_UNDEFINED) {
    for (int i = 0; i < *outcount; ++i) complete(handles[indices[i]], end, st.at(i));
  }
  return rc;
}

// Tests poll: only a test that completes something is recorded.
int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  MPI_Request handle = request != nullptr ? *request : MPI_REQUEST_NULL;
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  uint64_t t0 = start_ticks();
  int rc = PMPI_Test(request, flag, st);
  if (rc == MPI_SUCCESS && flag != nullptr && *flag) {
    uint64_t end = t0 != 0 ? now_ticks() : 0;
    wait_call(t0, end, "MPI_Test");
    complete(handle, end, st);
  }
  return rc;
}

int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  RequestCopy handles(count, requests);
  StatusArray st(count, statuses);
  uint64_t t0 = start_ticks();
  int rc = PMPI_Testall(count, requests, flag, st.get());
  if (rc == MPI_SUCCESS && flag != nullptr && *flag) {
    uint64_t end = t0 != 0 ? now_ticks() : 0;
    wait_call(t0, end, "MPI_Testall");
    for (int i = 0; i < static_cast<int>(handles.size()); ++i) complete(handles[i], end, st.at(i));
  }
  return rc;
}

int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  RequestCopy handles(count, requests);
  MPI_Status local;
  MPI_Status* st = status == MPI_STATUS_IGNORE ? &local : status;
  uint64_t t0 = start_ticks();
  int rc = PMPI_Testany(count, requests, index, flag, st);
  if (rc == MPI_SUCCESS && flag != nullptr && *flag && index != nullptr && *index != MPI_UNDEFINED) {
    uint64_t end = t0 != 0 ? now_ticks() : 0;
    wait_call(t0, end, "MPI_Testany");
    complete(handles[*index], end, st);
  }
  return rc;
}

int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[]) {
  RequestCopy handles(incount, requests);
  StatusArray st(incount, statuses);
  uint64_t t0 = start_ticks();
  int rc = PMPI_Testsome(incount, requests, outcount, indices, st.get());
  if (rc == MPI_SUCCESS && outcount != nullptr && *outcount != MPI_UNDEFINED && *outcount > 0) {
    uint64_t end = t0 != 0 ? now_ticks() : 0;
    wait_call(t0, end, "MPI_Testsome");
    for (int i = 0; i < *outcount; ++i) complete(handles[indices[i]], end, st.at(i));
  }
  return rc;
}

int MPI_Request_free(MPI_Request* request) {
  if (request != nullptr) forget(*request);
  return PMPI_Request_free(request);
}

// Communicators: made and freed collectively over the parent (or the
// communicator itself); each new one becomes a group.

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
  Collective c(comm, "MPI_Comm_split");
  int rc = PMPI_Comm_split(comm, color, key, newcomm);
  if (rc == MPI_SUCCESS) follow(*newcomm, "MPI_Comm_split");
  c.done(
      "MPI_Comm_split", kManagement, [] { return uint64_t{0}; }, -1);
  return rc;
}

int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm* newcomm) {
  Collective c(comm, "MPI_Comm_split_type");
  int rc = PMPI_Comm_split_type(comm, split_type, key, info, newcomm);
  if (rc == MPI_SUCCESS) follow(*newcomm, "MPI_Comm_split_type");
  c.done(
      "MPI_Comm_split_type", kManagement, [] { return uint64_t{0}; }, -1);
  return rc;
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* newcomm) {
  Collective c(comm, "MPI_Comm_dup");
  int rc = PMPI_Comm_dup(comm, newcomm);
  if (rc == MPI_SUCCESS) follow(*newcomm, "MPI_Comm_dup");
  c.done(
      "MPI_Comm_dup", kManagement, [] { return uint64_t{0}; }, -1);
  return rc;
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm* newcomm) {
  Collective c(comm, "MPI_Comm_create");
  int rc = PMPI_Comm_create(comm, group, newcomm);
  if (rc == MPI_SUCCESS) follow(*newcomm, "MPI_Comm_create");
  c.done(
      "MPI_Comm_create", kManagement, [] { return uint64_t{0}; }, -1);
  return rc;
}

int MPI_Comm_free(MPI_Comm* comm) {
  if (comm == nullptr) return PMPI_Comm_free(comm);
  Collective c(*comm, "MPI_Comm_free");  // the state lives until PMPI_Comm_free deletes its attribute
  int rc = PMPI_Comm_free(comm);
  c.done(
      "MPI_Comm_free", kManagement, [] { return uint64_t{0}; }, -1);
  return rc;
}

}  // extern "C"
