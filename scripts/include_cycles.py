#!/usr/bin/env python3
"""Lists the include cycles between the files of one module under src/ (the architecture target "dependencies
go one way inside a module too"). A file's unit is its stem: foo.h and foo.cpp (or foo.cu) are one unit, so
foo.cpp including bar.h while bar.h (or bar.cpp) includes foo.h is a cycle foo -> bar -> foo. Only includes
by module path ("module/file.h") within the same module count; modules' order among themselves is CMake's.
A header `*_internal.h` (the internal header between a file's halves, ARCHITECTURE.md) takes the types of the
public header it serves: its own includes are not followed (foo.cpp -> foo_internal.h -> foo.h is no cycle).
Prints each cycle once as `module: a -> b -> a`, the ones in KNOWN marked as such; with FAIL_IF_ANY set, exits
1 when there is one not in KNOWN."""
import os, re, sys

# Cycles there were when this check came (issue 68), each with what keeps it; a new cycle fails the check.
# Untangled then: sim/sim_options.h, report's node_slot_heatmap in many_gpus, calibrate/fit_stage.h,
# exec/bench_options.h. Remove an entry once its cycle is gone.
KNOWN = {
    # A header takes a type from X.h while X.cpp calls into it: extract the type to a header of its own (as
    # sim/sim_options.h did) to remove.
    ('plan', ('search', 'search_work')): 'search_work.h takes SearchRequest from search.h; search_work.cpp defines its estimate',
    ('telemetry', ('recorder', 'recorder_child')): 'the recorder\'s halves (recorder_child.h between them)',
    # Registries: the interface and the factory that names every implementation share a unit.
    ('telemetry', ('amdsmi_source', 'source', 'vendor_library')): 'source.cpp makes every source',
    ('telemetry', ('nvml_source', 'source', 'vendor_library')): 'source.cpp makes every source',
    ('telemetry', ('procfs_source', 'source')): 'source.cpp makes every source',
    # op_budget builds four tiny graphs to size a graph before it is built, which build_graph checks; the
    # schedule table parses what layout.h declares (both in the zero-bubble schedules' files, left to them).
    ('graph', ('graph', 'op_budget')): 'op_budget builds tiny graphs; build_graph checks it',
    ('parallel', ('layout', 'schedule')): 'schedule.h takes Schedule from layout.h; layout.cpp parses by it',
}

include = re.compile(r'^\s*#\s*include\s+"([a-z_0-9]+)/([A-Za-z_0-9]+)\.(?:h|cuh)"', re.M)


def unit_graph(module_dir, module):
    """unit -> set of units of the same module it includes (from any of its files)."""
    graph = {}
    for name in sorted(os.listdir(module_dir)):
        stem, ext = os.path.splitext(name)
        if ext not in ('.h', '.cpp', '.cu', '.cuh'):
            continue
        text = open(os.path.join(module_dir, name), encoding='utf-8', errors='replace').read()
        edges = graph.setdefault(stem, set())
        if stem.endswith('_internal'):
            continue
        for target_module, target in include.findall(text):
            if target_module == module and target != stem:
                edges.add(target)
    return graph


def cycles(graph):
    """Each elementary cycle's smallest rotation, found by a depth-first walk from every unit (small graphs)."""
    found = set()

    def walk(start, unit, path, on_path):
        for nxt in sorted(graph.get(unit, ())):
            if nxt == start:
                found.add(tuple(path))
            elif nxt not in on_path and nxt > start:  # each cycle walked from its smallest unit only
                on_path.add(nxt)
                walk(start, nxt, path + [nxt], on_path)
                on_path.discard(nxt)

    for start in sorted(graph):
        walk(start, start, [start], {start})
    return sorted(found)


def main(roots):
    new = 0
    seen = set()
    for root in roots:
        for module in sorted(os.listdir(root)):
            module_dir = os.path.join(root, module)
            if not os.path.isdir(module_dir):
                continue
            for cycle in cycles(unit_graph(module_dir, module)):
                key = (module, tuple(sorted(cycle)))
                seen.add(key)
                known = KNOWN.get(key)
                print(f"{module}: {' -> '.join(cycle + (cycle[0],))}" + (f"  (known: {known})" if known else ""))
                new += known is None
    for module, units in sorted(set(KNOWN) - seen):
        print(f"{module}: {', '.join(units)} no longer form a cycle: remove it from KNOWN")
    if os.environ.get('FAIL_IF_ANY') and new:
        print(f"{new} new include cycle(s) inside a module: make the dependency go one way (a type in a header "
              "of its own, or a parameter)")
        sys.exit(1)


main(sys.argv[1:])
