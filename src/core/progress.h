// Progress and notices from library code: the library never prints; it hands each line to a callback the
// caller supplies (the CLI prints it to stderr), and stays silent when none is set.
#pragma once

#include <functional>
#include <string_view>

namespace calo::core {

/// Receives one complete line of status text for the user, without its trailing newline; an unset NoticeFn
/// means silence (callers test it before calling).
using NoticeFn = std::function<void(std::string_view line)>;

}  // namespace calo::core
