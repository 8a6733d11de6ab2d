// Real processes as /proc shows them: whether one is gone, which are descended from one, and waiting until a
// list of them is gone. Shared by the suites that check no process calo started outlives it.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace calo::testing {

/// The text of /proc/<pid>/stat; empty when the process is gone.
inline std::string proc_stat(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

/// True when `pid` is gone: no such process, or a zombie nobody has reaped yet (a container's init may not).
inline bool process_gone(pid_t pid) {
  const std::string stat = proc_stat(pid);
  const auto state_at = stat.rfind(") ");
  return stat.empty() || (state_at != std::string::npos && stat[state_at + 2] == 'Z');
}

/// The name of `pid` (/proc/<pid>/comm, at most 15 characters); empty when it is gone.
inline std::string process_name(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(file, name);
  return name;
}

/// The parent of `pid`; 0 when it is gone.
inline pid_t parent_pid(pid_t pid) {
  const std::string stat = proc_stat(pid);
  const auto state_at = stat.rfind(") ");
  if (state_at == std::string::npos) return 0;
  std::istringstream fields(stat.substr(state_at + 4));  // ") S 1234 ..."
  pid_t parent = 0;
  fields >> parent;
  return parent;
}

/// Every living process below `root` (children, their children, ...), as /proc shows them now.
inline std::vector<pid_t> descendants(pid_t root) {
  std::vector<std::pair<pid_t, pid_t>> all;  // pid, parent
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    if (!process_gone(pid)) all.emplace_back(pid, parent_pid(pid));
  }
  std::vector<pid_t> found{root};
  for (std::size_t searched = 0; searched < found.size(); ++searched) {
    for (const auto& [pid, parent] : all)
      if (parent == found[searched]) found.push_back(pid);
  }
  found.erase(found.begin());
  return found;
}

/// The pids written one per line in `path`.
inline std::vector<pid_t> read_pids(const std::filesystem::path& path) {
  std::ifstream file(path);
  std::vector<pid_t> pids;
  for (pid_t pid = 0; file >> pid;) pids.push_back(pid);
  return pids;
}

/// Waits up to `timeout_s` for every one of `pids` to be gone; returns those still there.
inline std::vector<pid_t> wait_gone(const std::vector<pid_t>& pids, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::vector<pid_t> left = pids;
  while (true) {
    std::vector<pid_t> still;
    for (const pid_t pid : left)
      if (!process_gone(pid)) still.push_back(pid);
    left = still;
    if (left.empty() || std::chrono::steady_clock::now() >= deadline) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// Kills (SIGKILL) every pid in `pids`: a failed test leaves no sleeper behind.
inline void kill_all(const std::vector<pid_t>& pids) {
  for (const pid_t pid : pids) ::kill(pid, SIGKILL);
}

}  // namespace calo::testing
