#!/usr/bin/env python3
"""gemm_ratios.py: the speed of one GEMM solution against cuBLAS bf16 per shape, from the JSON
reports of `nibble grade` (scripts/gemm-all.sh writes one per task, config and solution, named
<task>-<config>-<solution>.json), as a Markdown table, with the open targets checked:
  FP4 tasks (issue 25)   M = 1: at most 1.25x the weight-read floor; M = 16: at most 1.35x;
                         M > 16: at least 1.0x cuBLAS bf16; M = 4096: at least 1.1x
  gemm-w4a16-int4 (24)   M = 4096: at least 1.0x cuBLAS bf16 (M = 1 and 16: the floor columns)
Reports that carry the weight-read floor (`timing.floors.weight_read_us`, schema 1
`timing.floor_us_weight_read`: a kernel that only reads W's codes and scales, timed by the same
grade) add the floor and the solution's time as a multiple of it; a floor target without a floor
reads "no floor".

  python3 scripts/gemm_ratios.py REPORT_DIR [--solution fp4_sm90] [--against cublas_bf16]
  python3 scripts/gemm_ratios.py DIR --solution int4_gemm_sm90 --against int4_gemm_cublas_bf16

Exit status: 0 every shape has both reports, passed; 1 a grade did not pass (its row says which);
2 bad input: REPORT_DIR is not a folder, a report is unreadable or not a GEMM grade report, or a
shape lacks one of the two reports."""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "python"))
from nibble import load_json  # noqa: E402  (the repository's module: a key twice refused, as nibble does)


def fail(msg):
    print(f"gemm_ratios.py: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        r = load_json(path)
    except (OSError, ValueError) as e:
        fail(f"cannot read {path}: {e}")
    ok = (isinstance(r, dict) and isinstance(r.get("task"), str) and r["task"].startswith("gemm-")
          and isinstance(r.get("config"), str) and isinstance(r.get("correctness"), dict))
    if ok and r.get("disposition") == "Passed":
        t = r.get("timing")
        ok = isinstance(t, dict) and number(t.get("us_per_call")) and t["us_per_call"] > 0
        ok = ok and all(number(t.get(k)) for k in ("tflops", "achieved_bandwidth_Bps") if k in t)
        ok = ok and number(r["correctness"].get("worst_rel_err", 0.0))
    if not ok:
        fail(f"{path} is not a GEMM grade report (nibble grade --task gemm-... --out) with its timing")
    return r


def number(v):
    """A JSON number (not a boolean, which Python counts as an int)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def shape_key(item):
    """Sort by task, then M, N, K as numbers (m1, m16, m128, m4096), then the config's name."""
    (task, cfg), _ = item
    m = re.match(r"m(\d+)-n(\d+)-k(\d+)$", cfg)
    return (task, tuple(int(x) for x in m.groups()) if m else (1 << 62,), cfg)


def target_for(task, M, ratio, x_floor):
    """The open target of (task, M) and whether it is met: speed-up `ratio` over cuBLAS bf16, time
    `x_floor` times the weight-read floor (None: the report has no floor). Empty where none is set."""
    if M is None:
        return ""
    if task == "gemm-w4a16-int4":
        return "1.0x: " + ("met" if ratio >= 1.0 else "missed") if M == 4096 else ""
    if M in (1, 16):
        limit = 1.25 if M == 1 else 1.35
        return f"{limit}x floor: " + ("no floor" if x_floor is None else "met" if x_floor <= limit else "missed")
    if M > 16:
        limit = 1.1 if M == 4096 else 1.0
        return f"{limit}x: " + ("met" if ratio >= limit else "missed")
    return ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--solution", default="fp4_sm90")
    ap.add_argument("--against", default="cublas_bf16")
    a = ap.parse_args()
    if not os.path.isdir(a.dir):
        fail(f"{a.dir} is not a folder of reports")
    shapes = {}
    for name in sorted(os.listdir(a.dir)):
        for sol in (a.solution, a.against):
            if name.endswith(f"-{sol}.json"):
                r = load(os.path.join(a.dir, name))
                shapes.setdefault((r["task"], r["config"]), {})[sol] = r
    if not shapes:
        fail(f"no <task>-<config>-{a.solution}.json or -{a.against}.json reports in {a.dir}")
    print(f"| task | config | {a.solution} us | {a.against} us | speed-up | TFLOP/s | TB/s | rel. error | target "
          f"| read floor us | x floor |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    missing = not_passed = 0
    for (task, cfg), rs in sorted(shapes.items(), key=shape_key):
        if a.solution not in rs or a.against not in rs:
            print(f"| {task} | {cfg} | missing report | | | | | | | | |")
            lacking = a.against if a.solution in rs else a.solution
            print(f"gemm_ratios.py: {task} {cfg} has no {lacking} report ({task}-{cfg}-{lacking}.json)", file=sys.stderr)
            missing += 1
            continue
        s, c = rs[a.solution], rs[a.against]
        if s.get("disposition") != "Passed" or c.get("disposition") != "Passed":
            print(f"| {task} | {cfg} | {s.get('disposition')} | {c.get('disposition')} | | | | | | | |")
            not_passed += 1
            continue
        ts, tc = s["timing"]["us_per_call"], c["timing"]["us_per_call"]
        ratio = tc / ts
        m = re.match(r"m(\d+)-", cfg)
        floors = s["timing"].get("floors")  # schema 2; schema 1 kept it at timing.floor_us_weight_read
        floor = floors.get("weight_read_us") if isinstance(floors, dict) else s["timing"].get("floor_us_weight_read")
        has_floor = number(floor) and floor > 0 and floor != float("inf")
        target = target_for(task, int(m.group(1)) if m else None, ratio, ts / floor if has_floor else None)
        fcols = " | ".join([f"{floor:.2f}" if has_floor else "", f"{ts / floor:.2f}x" if has_floor else ""]) + " |"
        print(f"| {task} | {cfg} | {ts:.2f} | {tc:.2f} | {ratio:.2f}x | {s['timing'].get('tflops', float('nan')):.1f} | "
              f"{s['timing'].get('achieved_bandwidth_Bps', float('nan')) / 1e12:.2f} | "
              f"{s['correctness'].get('worst_rel_err', float('nan')):.1e} | {target} | {fcols}")
    return 2 if missing else 1 if not_passed else 0


if __name__ == "__main__":
    sys.exit(main())
