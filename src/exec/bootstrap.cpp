// Bootstrap implementations: single rank, MPI, and a Unix socket served by rank 0.
#include "exec/bootstrap.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "exec/mpi_env.h"

#ifdef CALO_EXEC_HAVE_MPI
#include <mpi.h>
#endif

namespace calo::exec {
namespace {

class SingleBootstrap final : public Bootstrap {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) override {
    return {std::vector<std::byte>(mine.begin(), mine.end())};
  }
  void barrier() override {}
  std::string kind() const override { return "single"; }
};

#ifdef CALO_EXEC_HAVE_MPI
class MpiBootstrap final : public Bootstrap {
 public:
  MpiBootstrap(int rank, int world_size) : rank_(rank), world_size_(world_size) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) override {
    std::lock_guard lock(mpi_mutex());
    const long long my_size = static_cast<long long>(mine.size());
    std::vector<long long> sizes(static_cast<size_t>(world_size_));
    MPI_Allgather(&my_size, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG, MPI_COMM_WORLD);
    std::vector<int> counts(sizes.size());
    std::vector<int> offsets(sizes.size());
    int total = 0;
    for (size_t index = 0; index < sizes.size(); ++index) {
      counts[index] = static_cast<int>(sizes[index]);
      offsets[index] = total;
      total += counts[index];
    }
    std::vector<std::byte> gathered(static_cast<size_t>(std::max(total, 1)));
    MPI_Allgatherv(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, gathered.data(), counts.data(),
                   offsets.data(), MPI_BYTE, MPI_COMM_WORLD);
    std::vector<std::vector<std::byte>> result(sizes.size());
    for (size_t index = 0; index < sizes.size(); ++index) {
      result[index].assign(gathered.begin() + offsets[index],
                           gathered.begin() + offsets[index] + counts[index]);
    }
    return result;
  }
  void barrier() override {
    std::lock_guard lock(mpi_mutex());
    MPI_Barrier(MPI_COMM_WORLD);
  }
  std::string kind() const override { return "mpi"; }

 private:
  int rank_;
  int world_size_;
};
#endif

/// Writes all of `size` bytes or throws.
void write_all(int fd, const void* data, size_t size, const std::string& what) {
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = ::send(fd, bytes, size, MSG_NOSIGNAL);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0)
      throw RuntimeFailure(fmt::format("bootstrap: sending to {} failed: {}", what, std::strerror(errno)));
    bytes += written;
    size -= static_cast<size_t>(written);
  }
}

/// Reads exactly `size` bytes or throws (a closed peer means that rank died).
void read_all(int fd, void* data, size_t size, const std::string& what) {
  auto* bytes = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t got = ::recv(fd, bytes, size, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0)
      throw RuntimeFailure(fmt::format("bootstrap: {} closed the connection (did it fail?)", what));
    if (got < 0)
      throw RuntimeFailure(fmt::format("bootstrap: reading from {} failed: {}", what, std::strerror(errno)));
    bytes += got;
    size -= static_cast<size_t>(got);
  }
}

void write_blob(int fd, std::span<const std::byte> blob, const std::string& what) {
  const std::uint64_t size = blob.size();
  write_all(fd, &size, sizeof(size), what);
  if (size > 0) write_all(fd, blob.data(), blob.size(), what);
}

std::vector<std::byte> read_blob(int fd, const std::string& what) {
  std::uint64_t size = 0;
  read_all(fd, &size, sizeof(size), what);
  std::vector<std::byte> blob(size);
  if (size > 0) read_all(fd, blob.data(), blob.size(), what);
  return blob;
}

/// Star topology over a Unix stream socket: rank 0 accepts world-1 clients and relays all_gather.
class SocketBootstrap final : public Bootstrap {
 public:
  SocketBootstrap(int rank, int world_size, const std::string& path, double timeout_s)
      : rank_(rank), world_size_(world_size) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path.size() >= sizeof(address.sun_path)) {
      throw RuntimeFailure(fmt::format("bootstrap socket path '{}' is too long", path));
    }
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    if (rank_ == 0) {
      listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      ::unlink(path.c_str());
      if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
          ::listen(listen_fd_, world_size_) != 0) {
        throw RuntimeFailure(fmt::format("bootstrap: cannot listen on {}: {}", path, std::strerror(errno)));
      }
      path_ = path;
      peers_.assign(static_cast<size_t>(world_size_), -1);
      for (int accepted = 1; accepted < world_size_; ++accepted) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EINTR) {
            --accepted;
            continue;
          }
          throw RuntimeFailure(fmt::format("bootstrap: accept failed: {}", std::strerror(errno)));
        }
        std::int32_t peer_rank = -1;
        read_all(fd, &peer_rank, sizeof(peer_rank), "a connecting rank");
        if (peer_rank <= 0 || peer_rank >= world_size_ || peers_[static_cast<size_t>(peer_rank)] >= 0) {
          throw RuntimeFailure(fmt::format("bootstrap: unexpected rank {} connected", peer_rank));
        }
        peers_[static_cast<size_t>(peer_rank)] = fd;
      }
    } else {
      while (true) {
        root_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (::connect(root_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) break;
        ::close(root_fd_);
        root_fd_ = -1;
        if (std::chrono::steady_clock::now() > deadline) {
          throw RuntimeFailure(fmt::format("bootstrap: rank {} could not reach rank 0 at {} within {} s",
                                           rank_, path, timeout_s));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      const std::int32_t my_rank = rank_;
      write_all(root_fd_, &my_rank, sizeof(my_rank), "rank 0");
    }
  }
  ~SocketBootstrap() override {
    for (int fd : peers_) {
      if (fd >= 0) ::close(fd);
    }
    if (root_fd_ >= 0) ::close(root_fd_);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) override {
    std::vector<std::vector<std::byte>> result(static_cast<size_t>(world_size_));
    if (rank_ == 0) {
      result[0].assign(mine.begin(), mine.end());
      for (int peer = 1; peer < world_size_; ++peer) {
        result[static_cast<size_t>(peer)] =
            read_blob(peers_[static_cast<size_t>(peer)], fmt::format("rank {}", peer));
      }
      for (int peer = 1; peer < world_size_; ++peer) {
        for (const auto& blob : result)
          write_blob(peers_[static_cast<size_t>(peer)], blob, fmt::format("rank {}", peer));
      }
    } else {
      write_blob(root_fd_, mine, "rank 0");
      for (auto& blob : result) blob = read_blob(root_fd_, "rank 0");
    }
    return result;
  }
  void barrier() override { all_gather({}); }
  std::string kind() const override { return "socket"; }

 private:
  int rank_;
  int world_size_;
  int listen_fd_ = -1;
  int root_fd_ = -1;
  std::vector<int> peers_;
  std::string path_;
};

void append_bytes(std::vector<std::byte>& out, const void* data, size_t size) {
  const auto* bytes = static_cast<const std::byte*>(data);
  out.insert(out.end(), bytes, bytes + size);
}

}  // namespace

std::vector<std::vector<std::byte>> share_group_blobs(
    Bootstrap& bootstrap, const std::vector<graph::CommGroup>& groups,
    const std::function<std::vector<std::byte>(int group_id)>& make_blob) {
  const int me = bootstrap.rank();
  // Serialized as repeated (int32 group id, uint64 size, bytes) for the groups this rank roots.
  std::vector<std::byte> mine;
  for (size_t group_id = 0; group_id < groups.size(); ++group_id) {
    if (groups[group_id].ranks.empty() || groups[group_id].ranks.front() != me) continue;
    const std::vector<std::byte> blob = make_blob(static_cast<int>(group_id));
    const std::int32_t id = static_cast<std::int32_t>(group_id);
    const std::uint64_t size = blob.size();
    append_bytes(mine, &id, sizeof(id));
    append_bytes(mine, &size, sizeof(size));
    mine.insert(mine.end(), blob.begin(), blob.end());
  }
  const auto gathered = bootstrap.all_gather(mine);
  std::vector<std::vector<std::byte>> result(groups.size());
  for (const auto& contribution : gathered) {
    size_t offset = 0;
    while (offset + sizeof(std::int32_t) + sizeof(std::uint64_t) <= contribution.size()) {
      std::int32_t id = 0;
      std::uint64_t size = 0;
      std::memcpy(&id, contribution.data() + offset, sizeof(id));
      std::memcpy(&size, contribution.data() + offset + sizeof(id), sizeof(size));
      offset += sizeof(id) + sizeof(size);
      const auto& members = groups.at(static_cast<size_t>(id)).ranks;
      if (std::find(members.begin(), members.end(), me) != members.end()) {
        result[static_cast<size_t>(id)].assign(
            contribution.begin() + static_cast<std::ptrdiff_t>(offset),
            contribution.begin() + static_cast<std::ptrdiff_t>(offset + size));
      }
      offset += size;
    }
  }
  return result;
}

std::unique_ptr<Bootstrap> make_bootstrap(const LaunchInfo& launch, double timeout_s) {
  if (launch.world_size <= 1) return std::make_unique<SingleBootstrap>();
#ifdef CALO_EXEC_HAVE_MPI
  if (launch.uses_mpi) return std::make_unique<MpiBootstrap>(launch.rank, launch.world_size);
#endif
  if (launch.bootstrap_path.empty()) {
    throw RuntimeFailure(fmt::format(
        "rank {} of {}: no MPI and no bootstrap socket ({} unset); launch with calo bench --nproc N or "
        "under mpirun with an MPI-enabled calo",
        launch.rank, launch.world_size, kEnvBootstrap));
  }
  return std::make_unique<SocketBootstrap>(launch.rank, launch.world_size, launch.bootstrap_path, timeout_s);
}

}  // namespace calo::exec
