#!/usr/bin/env python3
"""gemm_ratios.py: the speed of one FP4 GEMM solution against cuBLAS bf16 per shape, from the JSON
reports of `nibble grade` (scripts/gemm-all.sh writes one per task, config and solution, named
<task>-<config>-<solution>.json), as a Markdown table, with issue 7's targets checked: at M <= 16 at
least 3x the speed of cuBLAS bf16, at M = 4096 at least 0.9x.

  python3 scripts/gemm_ratios.py REPORT_DIR [--solution fp4_sm90] [--against cublas_bf16]

Exit status 2 when a report is unreadable or a shape lacks one of the two reports."""
import argparse
import json
import os
import re
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"gemm_ratios.py: cannot read {path}: {e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--solution", default="fp4_sm90")
    ap.add_argument("--against", default="cublas_bf16")
    a = ap.parse_args()
    shapes = {}
    for name in sorted(os.listdir(a.dir)):
        for sol in (a.solution, a.against):
            if name.endswith(f"-{sol}.json"):
                r = load(os.path.join(a.dir, name))
                shapes.setdefault((r["task"], r["config"]), {})[sol] = r
    if not shapes:
        sys.exit(f"gemm_ratios.py: no <task>-<config>-{a.solution}.json reports in {a.dir}")
    print(f"| task | config | {a.solution} us | {a.against} us | speed-up | TFLOP/s | TB/s | rel. error | target |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    missing = 0
    for (task, cfg), rs in sorted(shapes.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        if a.solution not in rs or a.against not in rs:
            print(f"| {task} | {cfg} | missing report | | | | | | |")
            missing += 1
            continue
        s, c = rs[a.solution], rs[a.against]
        if s.get("disposition") != "Passed" or c.get("disposition") != "Passed":
            print(f"| {task} | {cfg} | {s.get('disposition')} | {c.get('disposition')} | | | | | |")
            continue
        ts, tc = s["timing"]["us_per_call"], c["timing"]["us_per_call"]
        ratio = tc / ts
        m = re.match(r"m(\d+)-", cfg)
        target = ""
        if m and int(m.group(1)) <= 16:
            target = "3x: " + ("met" if ratio >= 3 else "missed")
        elif m and int(m.group(1)) == 4096:
            target = "0.9x: " + ("met" if ratio >= 0.9 else "missed")
        print(f"| {task} | {cfg} | {ts:.2f} | {tc:.2f} | {ratio:.2f}x | {s['timing'].get('tflops', float('nan')):.1f} | "
              f"{s['timing'].get('achieved_bandwidth_Bps', float('nan')) / 1e12:.2f} | "
              f"{s['correctness'].get('worst_rel_err', float('nan')):.1e} | {target} |")
    return 2 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
