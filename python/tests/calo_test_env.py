"""Shared helpers of the calo package tests: where the calo binary is, running `calo record`."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)


def calo_binary():
    path = os.environ.get("CALO_BIN")
    if not path or not os.access(path, os.X_OK):
        raise RuntimeError(f"CALO_BIN={path!r}: set it to the built calo binary (CTest does)")
    return path


def child_env():
    """The test's environment with the package (from the source tree) importable by the child."""
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGE_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("CALO_MARKER_SOCKET", None)
    return env


def record(out_dir, *child_args, extra_flags=(), timeout=120):
    """Runs `calo record --out OUT_DIR [flags] -- python child_train.py ARGS`; returns the CompletedProcess."""
    command = [calo_binary(), "record", "--out", str(out_dir), "--quiet", *extra_flags, "--",
               sys.executable, os.path.join(HERE, "child_train.py"), *map(str, child_args)]
    return subprocess.run(command, env=child_env(), capture_output=True, text=True, timeout=timeout)


def calo(*args, timeout=120):
    """Runs `calo ARGS...`; returns the CompletedProcess (text output)."""
    return subprocess.run([calo_binary(), *map(str, args)], capture_output=True, text=True, timeout=timeout)
