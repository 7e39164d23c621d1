#!/usr/bin/env python3
"""check_nibble_module.py: the `nibble` Python module (python/nibble) against the built command:
reports read back, a fixture's tensors checked against the SHA-256 the C++ generator wrote in its
manifest (hashed here by Python, from the arrays the module returns), grade() without a usable GPU
an error that says so, and with one a Passed report.

    python3 tests/python/check_nibble_module.py --nibble build/bin/nibble
"""
import argparse
import hashlib
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
import nibble  # noqa: E402
import numpy as np  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nibble", required=True)
    a = ap.parse_args()
    os.environ["NIBBLE_EXE"] = a.nibble
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    def refused(call, text, what):
        """call() must raise NibbleError whose message holds `text`."""
        try:
            call()
            check(False, what)
        except nibble.NibbleError as e:
            check(text in str(e), what)

    r = nibble.load_report(os.path.join(ROOT, "tests/data/reports/v2/h200-unfused-full.json"))
    check(r["disposition"] == "Passed" and r["task"] == "megakernel-int4-weight-decode", "load_report reads a v2 report")
    with tempfile.TemporaryDirectory() as tmp:
        other = os.path.join(tmp, "x.json")
        with open(other, "w") as f:
            f.write('{"schema": "nibble.calibration"}')
        refused(lambda: nibble.load_report(other), "not a nibble report", "a calibration table is not a report")
        with open(other, "w") as f:
            f.write('{"schema": "nibble.report", "disposition": "Failed", "disposition": "Passed"}')
        refused(lambda: nibble.load_report(other), "the key 'disposition' twice", "a report with a key twice is refused")
        # As the command reads them (a newcomer's findings): NaN is not JSON; a document nested past
        # Python's recursion limit is refused, not a RecursionError.
        with open(other, "w") as f:
            f.write('{"schema": "nibble.report", "timing": {"us_per_call": NaN}}')
        refused(lambda: nibble.load_report(other), "NaN is not a JSON number", "a report with NaN is refused")
        with open(other, "w") as f:
            f.write("[" * 100000 + "]" * 100000)
        refused(lambda: nibble.load_report(other), "nested too deep", "a report nested 100,000 deep is refused")

        for task, config in (("megakernel-int4-weight-decode", "tiny"), ("gemm-w4a16-nvfp4", "tiny")):
            path = nibble.fixture(task, config, 0, out=os.path.join(tmp, task))
            tensors, manifest = nibble.load_fixture(path)
            want = manifest["tensor_sha256"]
            bad = []
            for name, arr in tensors.items():
                raw = np.ascontiguousarray(arr)
                if raw.dtype == np.float32 and name in want and hashlib.sha256(raw.tobytes()).hexdigest() != want[name]:
                    raw = (raw.view(np.uint32) >> 16).astype("<u2")  # a bf16 tensor, widened: its bits again
                if hashlib.sha256(raw.tobytes()).hexdigest() != want.get(name):
                    bad.append(name)
            check(set(tensors) == set(want) and not bad,
                  f"load_fixture({task} {config}): {len(tensors)} tensors hash to the manifest's SHA-256 (mismatch: {bad})")

        try:
            rep = nibble.grade(os.path.join(os.path.dirname(a.nibble), "..", "lib", "libnibble_reference.so"),
                               config="tiny", seeds=(0,), extra=["--no-timing"])
            check(rep["disposition"] == "Passed", "grade() on a GPU: the reference passes")
        except nibble.NibbleError as e:
            check("GPU" in str(e) and "exited 2" in str(e), f"grade() without a usable GPU says so: {str(e)[:120]}")

    refused(lambda: nibble.load_fixture("/nonexistent"), "not a fixture folder", "load_fixture of a missing folder raises NibbleError")
    with tempfile.TemporaryDirectory() as tmp:  # a header length of 2^63: safetensors' own error becomes a NibbleError
        with open(os.path.join(tmp, "manifest.json"), "w") as f:
            f.write('{"file": "model.safetensors"}')
        with open(os.path.join(tmp, "model.safetensors"), "wb") as f:
            f.write((1 << 63).to_bytes(8, "little") + b"{}")
        refused(lambda: nibble.load_fixture(tmp), "not a readable safetensors file", "a corrupt safetensors file raises NibbleError")
    os.environ["NIBBLE_EXE"] = "/tmp"
    refused(nibble.find_nibble, "not an executable file", "a folder as NIBBLE_EXE is refused")
    os.environ["NIBBLE_EXE"] = "/nonexistent/nibble"
    refused(nibble.find_nibble, "NIBBLE_EXE", "a bad NIBBLE_EXE is refused")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
