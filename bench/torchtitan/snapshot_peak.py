#!/usr/bin/env python3
"""What was alive at the allocator's peak in a PyTorch memory snapshot (torchtitan's
--profiling.enable_memory_snapshot pickle, torch.cuda.memory._snapshot() format), for issue 39's misses.

Usage: snapshot_peak.py SNAPSHOT.pickle [TOP]
Replays the device-0 trace (alloc / free_requested), takes the allocated bytes before the trace from the
segments at dump time less the trace's net change, and prints the peak, the moment's position in the trace,
and the TOP largest blocks alive then with the frames that allocated them (blocks allocated before the trace
are summed as "before the trace").
"""
import pickle
import sys

GIB = 1024 ** 3


def frames_of(event, count=4):
    """The first `count` Python frames outside torch's own dispatch plumbing (the C++ frames are the allocator's)."""
    picked = []
    for frame in event.get("frames", []):
        name, filename = frame.get("name", ""), frame.get("filename", "")
        if not filename.endswith(".py") or "torch/utils/_" in filename or \
                filename.endswith(("torch/_ops.py", "torch/overrides.py")):
            continue
        picked.append(f"{filename.split('site-packages/')[-1]}:{frame.get('line', 0)} {name}")
        if len(picked) == count:
            break
    return picked


def main(path, top):
    with open(path, "rb") as handle:
        snapshot = pickle.load(handle)
    trace = snapshot["device_traces"][0]
    at_dump = sum(block["size"] for segment in snapshot["segments"] if segment.get("device", 0) == 0
                  for block in segment["blocks"] if block["state"] == "active_allocated")
    net = sum(event["size"] if event["action"] == "alloc" else -event["size"]
              for event in trace if event["action"] in ("alloc", "free_requested"))
    before = at_dump - net
    alive, current, peak, peak_at, peak_alive = {}, before, before, -1, {}
    for index, event in enumerate(trace):
        if event["action"] == "alloc":
            alive[event["addr"]] = event
            current += event["size"]
            if current > peak:
                peak, peak_at, peak_alive = current, index, dict(alive)
        elif event["action"] == "free_requested":
            alive.pop(event["addr"], None)
            current -= event["size"]
    print(f"trace events {len(trace)}; allocated before the trace {before / GIB:.3f} GiB; "
          f"peak {peak / GIB:.3f} GiB at event {peak_at}; allocated at dump {at_dump / GIB:.3f} GiB")
    blocks = sorted(peak_alive.values(), key=lambda event: -event["size"])
    print(f"alive at the peak, allocated during the trace: {sum(b['size'] for b in blocks) / GIB:.3f} GiB "
          f"in {len(blocks)} blocks; the {top} largest:")
    for event in blocks[:top]:
        print(f"  {event['size'] / GIB:8.3f} GiB  " + " <- ".join(frames_of(event)))
    if 0 <= peak_at < len(trace):
        print("the allocation that reached the peak: " + " <- ".join(frames_of(trace[peak_at], 6)))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25)
