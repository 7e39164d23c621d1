#!/usr/bin/env python3
"""calibration_table.py: the calibration tables written by `nibble calibrate --out` (one JSON per
task, config), one Markdown row each: the gate, the worst must-pass variant (the precision a correct
solution may legitimately lose), the closest must-fail variant (the smallest error of a dropped
feature), the margins on both sides of the gate, and whether every variant landed on its side.

  python3 scripts/calibration_table.py FILE_OR_DIR ...

Exit status 1 when a table is unhealthy (a must-pass variant over the gate or a must-fail one under
it), 2 when a file cannot be read."""
import json
import os
import sys


def tables(paths):
    for p in paths:
        names = sorted(os.path.join(p, n) for n in os.listdir(p) if n.endswith(".json")) if os.path.isdir(p) else [p]
        for n in names:
            try:
                with open(n) as f:
                    r = json.load(f)
            except (OSError, ValueError) as e:
                sys.exit(f"calibration_table.py: cannot read {n}: {e}")
            if r.get("schema") == "nibble.calibration":
                yield r


def main(argv):
    if not argv:
        sys.exit(__doc__)
    rows = sorted(tables(argv), key=lambda r: (r["task"], r["config"]))
    if not rows:
        sys.exit("calibration_table.py: no nibble.calibration JSON found")
    print("| task | config | gate | worst must-pass | closest must-fail | pass margin | fail margin | healthy |")
    print("|---|---|---:|---|---|---:|---:|---|")
    bad = 0
    for r in rows:
        gate = r["gate"]
        passes = [v for v in r["rows"] if v["expected"] == "PASS"]
        fails = [v for v in r["rows"] if v["expected"] == "FAIL"]
        wp = max(passes, key=lambda v: v["worst"])
        cf = min(fails, key=lambda v: v["worst"])
        bad += 0 if r["healthy"] else 1
        print(f"| {r['task']} | {r['config']} | {gate:g} | {wp['variant']} {wp['worst']:.2e} | {cf['variant']} {cf['worst']:.2e} | "
              f"{gate / wp['worst'] if wp['worst'] > 0 else float('inf'):.1f}x | {cf['worst'] / gate:.1f}x | "
              f"{'yes' if r['healthy'] else 'NO'} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
