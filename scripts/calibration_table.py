#!/usr/bin/env python3
"""calibration_table.py: the calibration tables written by `nibble calibrate --out` (one JSON per
task, config), one Markdown row each: the gate, the worst must-pass variant (the precision a correct
solution may legitimately lose), the closest must-fail variant (the smallest error of a dropped
feature), the margins on both sides of the gate, and whether every variant landed on its side.

  python3 scripts/calibration_table.py FILE_OR_DIR ...

Exit status: 0 every table healthy; 1 a table is unhealthy (a must-pass variant over the gate or a
must-fail one under it); 2 bad input (a path that does not exist, a file that is not valid JSON, a
calibration table without its rows, or no calibration table at all)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))
from nibble import load_json  # noqa: E402  (the repository's module: a key twice refused, as nibble does)


def fail(msg):
    print(f"calibration_table.py: {msg}", file=sys.stderr)
    sys.exit(2)


def tables(paths):
    for p in paths:
        if not os.path.exists(p):
            fail(f"{p}: no such file or folder")
        names = sorted(os.path.join(p, n) for n in os.listdir(p) if n.endswith(".json")) if os.path.isdir(p) else [p]
        for n in names:
            try:
                r = load_json(n)
            except (OSError, ValueError) as e:
                fail(f"cannot read {n}: {e}")
            if not isinstance(r, dict) or r.get("schema") != "nibble.calibration":
                if not os.path.isdir(p):  # named on its own: it had to be a table
                    fail(f"{n} is not a nibble calibration table (schema \"nibble.calibration\")")
                continue
            rows = r.get("rows")
            if (not isinstance(rows, list) or not all(isinstance(v, dict) and "expected" in v and "worst" in v for v in rows)
                    or not any(v["expected"] == "PASS" for v in rows) or not any(v["expected"] == "FAIL" for v in rows)
                    or not isinstance(r.get("gate"), (int, float))):
                fail(f"{n}: a calibration table without its gate or its PASS and FAIL rows")
            yield r


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    rows = sorted(tables(argv), key=lambda r: (r.get("task", "?"), r.get("config", "?")))
    if not rows:
        fail("no nibble.calibration JSON found in " + " ".join(argv))
    print("| task | config | gate | worst must-pass | closest must-fail | pass margin | fail margin | healthy |")
    print("|---|---|---:|---|---|---:|---:|---|")
    bad = 0
    for r in rows:
        gate = r["gate"]
        passes = [v for v in r["rows"] if v["expected"] == "PASS"]
        fails = [v for v in r["rows"] if v["expected"] == "FAIL"]
        # "worst" is null for a variant whose output was NaN: worse than any number
        key = lambda v: float("inf") if v["worst"] is None else v["worst"]
        wp = max(passes, key=key)
        cf = min(fails, key=key)
        bad += 0 if r.get("healthy") else 1
        w_p, w_f = key(wp), key(cf)
        print(f"| {r.get('task', '?')} | {r.get('config', '?')} | {gate:g} | {wp.get('variant', '?')} {w_p:.2e} | "
              f"{cf.get('variant', '?')} {w_f:.2e} | {gate / w_p if w_p > 0 else float('inf'):.1f}x | {w_f / gate:.1f}x | "
              f"{'yes' if r.get('healthy') else 'NO'} |")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
