"""nibble from Python: run a grade, read a report, load a fixture's tensors.

The grading itself is the `nibble` command (C++; installed by `pip install .` beside this module, or
built with CMake): this module runs it and reads what it writes, so a grade from Python is exactly
the grade of the command line.

    import nibble
    report = nibble.grade("solutions/decode/python/tinygemm_graph.py", config="tiny")
    report["disposition"], report["timing"]["us_per_call"]
    tensors, manifest = nibble.load_fixture(nibble.fixture("megakernel-int4-weight-decode", "tiny", 0))
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

__all__ = ["NibbleError", "find_nibble", "grade", "load_json", "load_report", "fixture", "load_fixture"]


class NibbleError(RuntimeError):
    """The nibble command could not do what was asked (its own message is in the text)."""


def find_nibble():
    """Path of the nibble executable: $NIBBLE_EXE, else `nibble` on PATH, else the one `pip install`
    put in this interpreter's environment (<sys.prefix>/bin). Raises NibbleError when none."""
    exe = os.environ.get("NIBBLE_EXE")
    if exe:
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            raise NibbleError(f"NIBBLE_EXE={exe} is not an executable file")
        return exe
    for exe in (shutil.which("nibble"), os.path.join(sys.prefix, "bin", "nibble")):
        if exe and os.path.isfile(exe) and os.access(exe, os.X_OK):
            return exe
    raise NibbleError("the nibble command was not found: pip install . from the repository, or build it with CMake "
                      "and set NIBBLE_EXE to build/bin/nibble")


def _run(args, timeout=None):
    # Its own session, so that on a timeout the whole group (nibble's children included) is killed.
    proc = subprocess.Popen([find_nibble()] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        raise NibbleError(f"nibble {args[0]} took longer than {timeout} s and was stopped (its children too)") from None
    return proc.returncode, stdout, stderr


def _object(pairs):
    """json's object_pairs_hook: an object with a key twice is refused, as the nibble command does
    (JSON leaves it undefined; Python keeps the last, other readers the first)."""
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"the key {k!r} twice in one object (JSON readers disagree on which one counts)")
        out[k] = v
    return out


def _constant(name):
    """json's parse_constant: NaN and Infinity are not JSON, and the nibble command refuses them."""
    raise ValueError(f"{name} is not a JSON number")


def _loads(text):
    """json.loads as the nibble command reads JSON (a key twice, NaN or Infinity refused); a document
    nested too deep for Python's parser is a ValueError too, not a RecursionError."""
    try:
        return json.loads(text, object_pairs_hook=_object, parse_constant=_constant)
    except RecursionError:
        raise ValueError("nested too deep for this reader") from None


def load_json(path):
    """The JSON document at `path`, read as the nibble command reads every JSON file: an object with a
    key twice, NaN and Infinity are refused. Raises OSError (unreadable) or ValueError (not JSON, a
    key twice, NaN or Infinity, nested too deep)."""
    with open(path, "rb") as f:
        return _loads(f.read())


def load_report(path):
    """A `nibble grade` report (docs/report-schema.md) as a dict. Raises NibbleError when the file is
    missing, not JSON, or not a nibble report."""
    try:
        report = load_json(path)
    except (OSError, ValueError) as e:
        raise NibbleError(f"{path}: cannot be read as a report: {e}") from e
    if not isinstance(report, dict) or report.get("schema") != "nibble.report":
        raise NibbleError(f'{path}: not a nibble report (schema "nibble.report")')
    return report


def grade(solution, task=None, config=None, seeds=(0, 1), out=None, extra=(), timeout=None):
    """Grades `solution` (a .so or a .py) with `nibble grade` and returns its report as a dict.

    task, config: as `--task`, `--config` (None: nibble's defaults); seeds: fixture seeds; out: where
    the report is kept (None: a temporary file, removed); extra: more command-line arguments (e.g.
    ["--no-timing"]). A grade that does not pass still returns its report (its "disposition" and
    "reason" say why); NibbleError when nibble wrote none (exit 2: bad arguments or no usable GPU;
    3: the grader failed), with nibble's own message.
    """
    if isinstance(seeds, int):
        seeds = (seeds,)
    if not isinstance(solution, (str, os.PathLike)):
        raise NibbleError("grade() takes one solution path; grade several with extra=[...] or the command line")
    with tempfile.TemporaryDirectory(prefix="nibble-py-") as tmp:
        path = out or os.path.join(tmp, "report.json")
        args = ["grade", "--solution", solution, "--seeds", ",".join(str(s) for s in seeds), "--out", path, "-q"]
        if task:
            args += ["--task", task]
        if config:
            args += ["--config", config]
        code, stdout, stderr = _run(args + list(extra), timeout)
        if not os.path.exists(path) or code not in (0, 1):
            raise NibbleError(f"nibble grade exited {code}: {(stderr or stdout).strip()}")
        return load_report(path)


def fixture(task, config, seed, out=None):
    """The folder of the fixture (task, config, seed): built by `nibble fixture build` into `out`, or
    into nibble's fixture cache when out is None (the same bytes on any machine). Returns the path."""
    args = ["fixture", "build", "--task", task, "--config", config, "--seed", seed, "-q"]
    if out:
        args += ["--out", out]
    code, stdout, stderr = _run(args)
    m = re.search(r"-> (.+)$", stdout.splitlines()[0]) if code == 0 and stdout else None
    if not m:
        raise NibbleError(f"nibble fixture build exited {code}: {(stderr or stdout).strip()}")
    return m.group(1).strip()


def load_fixture(path, framework="numpy"):
    """The tensors of the fixture folder `path` (model.safetensors) and its manifest (a dict).

    framework "numpy": numpy arrays; bf16 tensors come back as float32 holding the same values
    (exact: a bf16 is the top half of a float32), since numpy has no bf16. "torch": torch tensors in
    their own dtypes (bf16 included), on the CPU. The manifest's hashes are not re-checked here:
    `nibble fixture verify` does that.
    """
    try:
        manifest = load_json(os.path.join(path, "manifest.json"))
    except (OSError, ValueError) as e:
        raise NibbleError(f"{path}: not a fixture folder (its manifest.json: {e}); nibble.fixture() builds one") from e
    file = os.path.join(path, manifest.get("file", "model.safetensors"))
    if not os.path.isfile(file):
        raise NibbleError(f"{path}: the manifest names {file}, which is missing; rebuild the fixture")
    if framework not in ("numpy", "torch"):
        raise NibbleError(f'framework must be "numpy" or "torch", not {framework!r}')
    try:
        return _load_tensors(file, framework), manifest
    except NibbleError:
        raise
    except Exception as e:  # safetensors' own errors, a header that lies, a short file
        raise NibbleError(f"{file}: not a readable safetensors file ({type(e).__name__}: {e}); nibble fixture verify "
                          "says what is wrong, nibble.fixture() rebuilds it") from e


def _load_tensors(file, framework):
    if framework == "torch":
        try:
            from safetensors.torch import load_file
        except ImportError as e:
            raise NibbleError(f'framework="torch" needs torch: pip install torch (or the "torch" extra) ({e})') from e

        return load_file(file)
    import numpy as np
    from safetensors import safe_open

    tensors = {}
    with safe_open(file, framework="numpy") as f:
        bf16 = [k for k in f.keys() if f.get_slice(k).get_dtype() == "BF16"]
        for k in f.keys():
            if k not in bf16:
                tensors[k] = f.get_tensor(k)
    if bf16:
        # safetensors' numpy backend has no bf16: read those by the header's offsets.
        with open(file, "rb") as raw:
            n = int.from_bytes(raw.read(8), "little")
            header = _loads(raw.read(n))
            base = 8 + n
            for k in bf16:
                begin, end = header[k]["data_offsets"]
                raw.seek(base + begin)
                bits = np.frombuffer(raw.read(end - begin), dtype="<u2").astype(np.uint32) << 16
                tensors[k] = bits.view(np.float32).reshape(header[k]["shape"])
    return tensors
