// C ABI marker helper: see markers_c.h. Self-contained (libc only) so users can compile it into any program.
#include "telemetry/markers_c.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

long long monotonic_now_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec;
}

// One socket per process, opened on first use (markers are rare: a few per step).
int marker_fd() {
  static int fd = -2;
  if (fd == -2) fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  return fd;
}

int send_text(const char* text) {
  const char* path = std::getenv("CALO_MARKER_SOCKET");
  if (path == nullptr || *path == '\0') return -1;
  const int fd = marker_fd();
  if (fd < 0) return -1;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (std::strlen(path) >= sizeof(address.sun_path)) return -1;
  std::strcpy(address.sun_path, path);
  const ssize_t sent = sendto(fd, text, std::strlen(text), MSG_DONTWAIT | MSG_NOSIGNAL,
                              reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  return sent < 0 ? -1 : 0;
}

int send_marker(const char* body, int rank) {
  char line[512];
  if (rank >= 0) {
    std::snprintf(line, sizeof(line), "%s rank %d t_ns %lld", body, rank, monotonic_now_ns());
  } else {
    std::snprintf(line, sizeof(line), "%s t_ns %lld", body, monotonic_now_ns());
  }
  return send_text(line);
}

}  // namespace

extern "C" int calo_marker_begin_step(long long step, int rank) {
  char body[64];
  std::snprintf(body, sizeof(body), "begin step %lld", step);
  return send_marker(body, rank);
}

extern "C" int calo_marker_end_step(long long step, int rank) {
  char body[64];
  std::snprintf(body, sizeof(body), "end step %lld", step);
  return send_marker(body, rank);
}

extern "C" int calo_marker_phase(const char* name, int rank) {
  char body[256];
  std::snprintf(body, sizeof(body), "phase %s", name);
  return send_marker(body, rank);
}

extern "C" int calo_marker_send(const char* line) {
  return send_text(line);
}
