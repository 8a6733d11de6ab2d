"""Step and phase markers for `calo record`, sent as datagrams to the unix socket in $CALO_MARKER_SOCKET.

The protocol (docs/TELEMETRY.md, "Step and phase markers"): one line per datagram,
``begin step 12 rank 0 t_ns T``, ``end step 12 rank 0 t_ns T``, ``begin phase NAME``, ``end phase NAME``.
``t_ns`` is the sender's CLOCK_MONOTONIC (``time.monotonic_ns()`` on Linux), so a marker is timed when it is
made, not when it arrives. Outside `calo record` the variable is unset and every call returns at once.
"""

import os
import socket
import time

SOCKET_ENV = "CALO_MARKER_SOCKET"

_socket = None
_socket_path = None


def enabled():
    """True when this process runs under `calo record` (markers are sent)."""
    return bool(os.environ.get(SOCKET_ENV))


def _default_rank():
    """The training rank from torchrun/Slurm/MPI environment variables, or None."""
    for name in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        value = os.environ.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def mark(line):
    """Sends one protocol line; returns True if it was sent. Never blocks and never raises on a closed socket."""
    global _socket, _socket_path
    path = os.environ.get(SOCKET_ENV)
    if not path:
        return False
    if _socket is None or _socket_path != path:
        _socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        _socket.setblocking(False)
        _socket_path = path
    try:
        _socket.sendto(line.encode(), path)
        return True
    except OSError:  # calo has stopped, or its queue is full: the marker is lost, training goes on
        return False


def _suffix(rank):
    rank = _default_rank() if rank is None else rank
    text = "" if rank is None else f" rank {int(rank)}"
    return f"{text} t_ns {time.monotonic_ns()}"


def _check_phase_name(name):
    name = str(name)
    if not name or any(character.isspace() for character in name):
        raise ValueError(f"phase name {name!r}: give one word without spaces, e.g. 'backward'")
    return name


def begin_step(i, rank=None):
    """Marks the beginning of step `i` (rank: from $RANK and friends unless given)."""
    return os.environ.get(SOCKET_ENV) is not None and mark(f"begin step {int(i)}{_suffix(rank)}")


def end_step(i, rank=None):
    """Marks the end of step `i`."""
    return os.environ.get(SOCKET_ENV) is not None and mark(f"end step {int(i)}{_suffix(rank)}")


def begin_phase(name, rank=None):
    """Marks the beginning of phase `name` (one word)."""
    name = _check_phase_name(name)
    return os.environ.get(SOCKET_ENV) is not None and mark(f"begin phase {name}{_suffix(rank)}")


def end_phase(name, rank=None):
    """Marks the end of phase `name`."""
    name = _check_phase_name(name)
    return os.environ.get(SOCKET_ENV) is not None and mark(f"end phase {name}{_suffix(rank)}")


class step:
    """``with calo.step(i):`` marks one training step. The step ends even when the body raises.
    (A class, not a generator context manager: it costs a third as much when calo is not recording.)"""

    __slots__ = ("number", "rank")

    def __init__(self, i, rank=None):
        self.number = int(i)
        self.rank = rank

    def __enter__(self):
        begin_step(self.number, self.rank)
        return self

    def __exit__(self, *exc_info):
        end_step(self.number, self.rank)
        return False


class phase:
    """``with calo.phase("backward"):`` marks one phase (phases may nest and may span steps)."""

    __slots__ = ("name", "rank")

    def __init__(self, name, rank=None):
        self.name = _check_phase_name(name)
        self.rank = rank

    def __enter__(self):
        begin_phase(self.name, self.rank)
        return self

    def __exit__(self, *exc_info):
        end_phase(self.name, self.rank)
        return False
