#!/usr/bin/env python3
"""check_report_scripts.py: scripts/gemm_ratios.py and scripts/calibration_table.py on hand-made
reports whose answers are known: speed-ups 2.00x (M 16), 3.20x (M 1), 0.95x (M 4096: the FP4 1.1x
target missed; the int4 task's 1.0x met at 1.05x), a shape with one report missing (exit 2), a grade
that did not pass (exit 1), the read-floor columns (m16: 5.0 us over a 4.0 us floor = 1.25x, within
1.35x: met; m1 without a floor, or with a boolean one: empty, its target "no floor"; m1 at 1.30x a
floor: the 1.25x target missed), the rows in M order; malformed reports (no correctness, a numeric
config, a string TFLOP/s, a boolean time) exit 2 without a traceback; a healthy calibration table
(margins 0.01 / 0.002 = 5.0x and 0.04 / 0.01 = 4.0x) and an unhealthy one (exit 1); bad input for
both (exit 2, never a traceback); a table or report with a key twice refused as nibble refuses it (exit 2)."""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def report(task, cfg, us):
    return {"task": task, "config": cfg, "disposition": "Passed",
            "timing": {"us_per_call": us, "tflops": 1.5, "achieved_bandwidth_Bps": 2.5e12},
            "correctness": {"worst_rel_err": 1e-7}}


def calibration(task, cfg, must_pass, must_fail, healthy):
    return {"schema": "nibble.calibration", "task": task, "config": cfg, "gate": 0.01, "healthy": healthy,
            "rows": [{"variant": "fp32", "expected": "PASS", "worst": 0.0},
                     {"variant": "bf16", "expected": "PASS", "worst": must_pass},
                     {"variant": "swap", "expected": "FAIL", "worst": 1.4},
                     {"variant": "subnormal", "expected": "FAIL", "worst": must_fail}]}


def run(script, *args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", script), *args], capture_output=True, text=True)


def main():
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory() as d:
        t = "gemm-w4a16-nvfp4"
        shapes = {"m16-n3072-k3072": (5.0, 10.0), "m1-n8192-k3072": (6.0, 19.2), "m4096-n8192-k3072": (300.0, 285.0)}
        for cfg, (mine, theirs) in shapes.items():
            mr = report(t, cfg, mine)
            if cfg == "m16-n3072-k3072":
                mr["timing"]["floor_us_weight_read"] = 4.0  # schema 1
            if cfg == "m4096-n8192-k3072":
                mr["timing"]["floors"] = {"weight_read_us": 150.0}  # schema 2
            json.dump(mr, open(os.path.join(d, f"{t}-{cfg}-fp4_sm90.json"), "w"))
            json.dump(report(t, cfg, theirs), open(os.path.join(d, f"{t}-{cfg}-cublas_bf16.json"), "w"))
        r = run("gemm_ratios.py", d)
        expect(r.returncode == 0, f"gemm_ratios.py exit {r.returncode}: {r.stderr}")
        rows = {line.split("|")[2].strip(): line for line in r.stdout.splitlines() if line.startswith(f"| {t}")}
        expect("| 2.00x |" in rows.get("m16-n3072-k3072", ""), "m16 row")
        expect("| 3.20x |" in rows.get("m1-n8192-k3072", ""), "m1 row")
        expect("| 0.95x |" in rows.get("m4096-n8192-k3072", ""), "m4096 row")
        expect(rows.get("m16-n3072-k3072", "").endswith("| 1.35x floor: met | 4.00 | 1.25x |"), "m16 floor columns: " + rows.get("m16-n3072-k3072", ""))
        expect(rows.get("m1-n8192-k3072", "").endswith("| 1.25x floor: no floor |  |  |"), "m1 without a floor: " + rows.get("m1-n8192-k3072", ""))
        expect(rows.get("m4096-n8192-k3072", "").endswith("| 1.1x: missed | 150.00 | 2.00x |"),
               "a schema 2 floor: " + rows.get("m4096-n8192-k3072", ""))
        tr = report(t, "m1-n8192-k3072", 6.0)
        tr["timing"]["floor_us_weight_read"] = True  # a boolean is no floor (Python counts it as 1)
        json.dump(tr, open(os.path.join(d, f"{t}-m1-n8192-k3072-fp4_sm90.json"), "w"))
        r = run("gemm_ratios.py", d)
        rows = {line.split("|")[2].strip(): line for line in r.stdout.splitlines() if line.startswith(f"| {t}")}
        expect(rows.get("m1-n8192-k3072", "").endswith("| 1.25x floor: no floor |  |  |"), "a boolean floor: " + rows.get("m1-n8192-k3072", ""))
        tr["timing"]["floor_us_weight_read"] = 6.0 / 1.3
        json.dump(tr, open(os.path.join(d, f"{t}-m1-n8192-k3072-fp4_sm90.json"), "w"))
        r = run("gemm_ratios.py", d)
        rows = {line.split("|")[2].strip(): line for line in r.stdout.splitlines() if line.startswith(f"| {t}")}
        expect(rows.get("m1-n8192-k3072", "").endswith("| 1.25x floor: missed | 4.62 | 1.30x |"), "1.30x a floor: " + rows.get("m1-n8192-k3072", ""))
        json.dump(report(t, "m128-n4096-k4096", 20.0), open(os.path.join(d, f"{t}-m128-n4096-k4096-fp4_sm90.json"), "w"))
        r = run("gemm_ratios.py", d)
        expect(r.returncode == 2 and "missing report" in r.stdout, "a missing cuBLAS report must exit 2")
        expect("m128-n4096-k4096 has no cublas_bf16 report" in r.stderr, "and say which: " + r.stderr)
        order = [line.split("|")[2].strip() for line in r.stdout.splitlines() if line.startswith(f"| {t}")]
        expect(order == ["m1-n8192-k3072", "m16-n3072-k3072", "m128-n4096-k4096", "m4096-n8192-k3072"], f"M order: {order}")
        os.remove(os.path.join(d, f"{t}-m128-n4096-k4096-fp4_sm90.json"))
        bad = report(t, "m16-n3072-k3072", 5.0)
        bad["disposition"] = "Incorrect"
        json.dump(bad, open(os.path.join(d, f"{t}-m16-n3072-k3072-fp4_sm90.json"), "w"))
        r = run("gemm_ratios.py", d)
        expect(r.returncode == 1 and "| Incorrect | Passed |" in r.stdout, "a grade that did not pass must exit 1")

    with tempfile.TemporaryDirectory() as d:  # gemm-w4a16-int4: 1.0x cuBLAS bf16 at M = 4096, no target at M = 16
        t = "gemm-w4a16-int4"
        for cfg, (mine, theirs) in {"m4096-n4096-k4096": (100.0, 105.0), "m16-n3072-k3072": (5.0, 10.0)}.items():
            json.dump(report(t, cfg, mine), open(os.path.join(d, f"{t}-{cfg}-int4_gemm_sm90.json"), "w"))
            json.dump(report(t, cfg, theirs), open(os.path.join(d, f"{t}-{cfg}-int4_gemm_cublas_bf16.json"), "w"))
        r = run("gemm_ratios.py", d, "--solution", "int4_gemm_sm90", "--against", "int4_gemm_cublas_bf16")
        expect(r.returncode == 0, f"gemm_ratios.py int4 exit {r.returncode}: {r.stderr}")
        rows = {line.split("|")[2].strip(): line for line in r.stdout.splitlines() if line.startswith(f"| {t}")}
        expect("| 1.05x |" in rows.get("m4096-n4096-k4096", "") and "| 1.0x: met |" in rows["m4096-n4096-k4096"],
               "int4 m4096: " + rows.get("m4096-n4096-k4096", ""))
        expect(rows.get("m16-n3072-k3072", "").endswith("| 2.00x | 1.5 | 2.50 | 1.0e-07 |  |  |  |"),
               "int4 m16, no target: " + rows.get("m16-n3072-k3072", ""))

    with tempfile.TemporaryDirectory() as d:
        no_corr = report("gemm-x", "c", 5.0)
        del no_corr["correctness"]
        int_cfg = report("gemm-x", "c", 5.0)
        int_cfg["config"] = 5
        str_tflops = report("gemm-x", "c", 5.0)
        str_tflops["timing"]["tflops"] = "x"
        bool_time = report("gemm-x", "c", 5.0)
        bool_time["timing"]["us_per_call"] = True
        for case, content in [("nonexistent", None), ("not a folder", "x"), ("a decode report", {"task": "megakernel", "config": "full"}),
                              ("a JSON list", []), ("truncated", "{\"task\": "), ("no timing", {"task": "gemm-x", "config": "c", "disposition": "Passed"}),
                              ("no correctness", no_corr), ("a numeric config", int_cfg), ("TFLOP/s a string", str_tflops),
                              ("a boolean time", bool_time)]:
            path = os.path.join(d, "sub")
            if case == "not a folder":
                with open(path, "w") as f:
                    f.write("x")
            elif content is not None:
                os.makedirs(path, exist_ok=True)
                with open(os.path.join(path, "gemm-x-c-fp4_sm90.json"), "w") as f:
                    f.write(content if isinstance(content, str) else json.dumps(content))
            r = run("gemm_ratios.py", path)
            expect(r.returncode == 2 and "Traceback" not in r.stderr, f"gemm_ratios.py on {case}: exit {r.returncode} {r.stderr}")
            if os.path.isdir(path):
                for n in os.listdir(path):
                    os.remove(os.path.join(path, n))
                os.rmdir(path)
            elif os.path.exists(path):
                os.remove(path)

    with tempfile.TemporaryDirectory() as d:
        json.dump(calibration("gemm-bf16-mxfp4", "tiny", 0.002, 0.04, True), open(os.path.join(d, "a.json"), "w"))
        r = run("calibration_table.py", d)
        expect(r.returncode == 0, f"calibration_table.py exit {r.returncode}: {r.stderr}")
        expect("bf16 2.00e-03" in r.stdout and "subnormal 4.00e-02" in r.stdout, "worst pass / closest fail")
        expect("| 5.0x | 4.0x | yes |" in r.stdout, "margins: " + r.stdout)
        json.dump(calibration("gemm-bf16-mxfp4", "m1", 0.02, 0.04, False), open(os.path.join(d, "b.json"), "w"))
        r = run("calibration_table.py", d)
        expect(r.returncode == 1 and "| NO |" in r.stdout, "an unhealthy table must exit 1")
        with open(os.path.join(d, "c.json"), "w") as f:
            f.write("{\"schema\": ")
        r = run("calibration_table.py", d)
        expect(r.returncode == 2 and "Traceback" not in r.stderr, "a truncated table must exit 2: " + r.stderr)
        # A key twice (Python's json keeps the last, the nibble command refuses the file): both scripts
        # refuse it as the command does, naming the key.
        with open(os.path.join(d, "c.json"), "w") as f:
            f.write(json.dumps(calibration("gemm-bf16-mxfp4", "m1", 0.002, 0.04, True))[:-1] + ', "gate": 0.5}')
        r = run("calibration_table.py", d)
        expect(r.returncode == 2 and "'gate' twice" in r.stderr and "Traceback" not in r.stderr,
               f"a table with a key twice must exit 2: {r.returncode} {r.stderr}")
    with tempfile.TemporaryDirectory() as d:
        t = "gemm-w4a16-nvfp4"
        json.dump(report(t, "m1-n3072-k3072", 10.0), open(os.path.join(d, f"{t}-m1-n3072-k3072-cublas_bf16.json"), "w"))
        with open(os.path.join(d, f"{t}-m1-n3072-k3072-fp4_sm90.json"), "w") as f:
            f.write(json.dumps(report(t, "m1-n3072-k3072", 5.0))[:-1] + ', "disposition": "Incorrect"}')
        r = run("gemm_ratios.py", d)
        expect(r.returncode == 2 and "'disposition' twice" in r.stderr and "Traceback" not in r.stderr,
               f"a report with a key twice must exit 2: {r.returncode} {r.stderr}")
        for args in (["/nonexistent"], [tempfile.mkdtemp()], [os.path.join(ROOT, "README.md")], []):
            r = run("calibration_table.py", *args)
            expect(r.returncode == 2 and "Traceback" not in r.stderr, f"calibration_table.py {args}: exit {r.returncode}")

    for f in failures:
        print("FAIL:", f)
    print("report scripts:", "FAILED" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
