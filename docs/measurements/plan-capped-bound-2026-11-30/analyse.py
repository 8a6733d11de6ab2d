"""Ratio of the simulated step to the bound at the static power-cap clock (no headroom), per search.

Each line of a *.txt.xz: `CAPB <layout...> <max-clock bound s> <cap-clock bound s> <simulated s> <ratio>`, printed by
a build of 5e5d07a with instrument.diff applied, for every layout the search simulated (README.md).
"""
import lzma
import sys
from pathlib import Path

for path in sorted(Path(sys.argv[1] if len(sys.argv) > 1 else ".").glob("*.txt.xz")):
    rows = [line.split() for line in lzma.open(path, "rt")]
    ratio = sorted(float(row[-2]) / float(row[-3]) for row in rows)
    plain = sorted(float(row[-2]) / float(row[-4]) for row in rows)
    print(f"{path.name}: {len(rows)} simulations; simulated / cap-clock bound min {ratio[0]:.4f} "
          f"median {ratio[len(ratio) // 2]:.4f}; simulated / max-clock bound min {plain[0]:.4f} "
          f"median {plain[len(plain) // 2]:.4f}")
