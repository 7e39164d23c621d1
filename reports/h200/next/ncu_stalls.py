#!/usr/bin/env python3
"""ncu_stalls.py: from `ncu --import R --page raw --csv`, on stdin, the ten largest warp stall reasons
of each profiled kernel launch (WarpStateStats' smsp__average_warps_issue_stalled_<reason>_per_issue_active:
cycles a warp waited on the reason per instruction issued; "no_instruction" is the instruction fetch,
"long_scoreboard" a global or local load, ...), and the same per warp-active cycle where present.
  ncu --import r.ncu-rep --page raw --csv --print-units base | python3 ncu_stalls.py"""
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def main():
    rows = list(csv.reader(sys.stdin))
    if len(rows) < 3:
        return 0
    head = rows[0]
    name_col = head.index("Kernel Name") if "Kernel Name" in head else None
    for values in rows[2:]:
        kernel = values[name_col][:60] if name_col is not None else "?"
        for suffix, what in (("_per_issue_active.ratio", "cycles per issued instruction"),
                             ("_per_warp_active.pct", "% of warp-active cycles")):
            stalls = []
            for h, x in zip(head, values):
                v = number(x)
                if v is None or "issue_stalled_" not in h or not h.endswith(suffix):
                    continue
                stalls.append((v, h.split("issue_stalled_")[1][: -len(suffix)]))
            if stalls:
                stalls.sort(reverse=True)
                print("  %s stalls (%s): %s" % (kernel, what, ", ".join("%s %.2f" % (r, v) for v, r in stalls[:10])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
