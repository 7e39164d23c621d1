"""python-call-cost.py: where a Python GEMM solution's host time per call goes, outside the grader.

On the device (torch and a GPU needed), in one process: the bundled dequant_matmul.py's replay path
(the CUDA graph of its mm replayed on an external stream, as `run` does after its first call), then
each of its parts alone, each the median host time of 2000 calls in us. At 86c7d66 (H200) and 074e7e2
(H100) the grader's clock saw ~140 us per call beyond a 3 us GPU span at the tiny configs
(python_solutions_gpu: InvalidTiming); if the path below costs far less, the rest is the shim's or the
child's, not PyTorch's.

    python3 reports/h200/next/python-call-cost.py [M N K]     (default 16 3072 3072)
"""
import statistics
import sys
import time
import types

import torch

sys.modules.setdefault("nibble_abi", types.SimpleNamespace(NotSupported=RuntimeError))
sys.path.insert(0, "solutions/gemm_fp4/python")
import dequant_matmul  # noqa: E402


class View:
    """What the shim hands `run`: a tensor's address, offset and shape, and DLPack."""

    def __init__(self, t):
        self.t, self.data_ptr, self.byte_offset, self.shape = t, t.data_ptr(), 0, tuple(t.shape)

    def __dlpack__(self, **kw):
        return self.t.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def median_us(fn, n=2000):
    for _ in range(50):
        fn()
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
        torch.cuda.synchronize()
    return statistics.median(samples) / 1e3


def main():
    m, n, k = (int(v) for v in sys.argv[1:4]) if len(sys.argv) >= 4 else (16, 3072, 3072)
    raw = torch.cuda.Stream()
    handle = object.__new__(dequant_matmul.Handle)
    handle.stream = torch.cuda.ExternalStream(raw.cuda_stream)
    handle.w_t = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
    handle.graphs = {}
    a = View(torch.randn(m, k, device="cuda", dtype=torch.bfloat16))
    c = View(torch.empty(m, n, device="cuda", dtype=torch.bfloat16))
    handle.call(a, c)  # the first call captures
    torch.cuda.synchronize()
    graph = next(iter(handle.graphs.values()))
    # The rows run after this, on the solution's stream made current once (run's own context sets
    # it again and restores it): the rows below time their calls alone.
    torch.cuda.set_stream(handle.stream)
    rows = [("run's replay path (dict lookup, stream context, replay)", lambda: handle.call(a, c))]
    rows.append(("stream context alone (enter, exit)", lambda: _ctx(handle.stream)))
    rows.append(("graph.replay() alone, stream current", graph.replay))
    rows.append(("torch.mm eager, stream current", lambda: torch.mm(a.t, handle.w_t, out=c.t)))
    rows.append(("torch.from_dlpack(A) + (C)", lambda: (torch.from_dlpack(a), torch.from_dlpack(c))))
    rows.append(("torch.cuda.synchronize() alone", torch.cuda.synchronize))
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ev0.record()
    for _ in range(100):
        graph.replay()
    ev1.record()
    torch.cuda.synchronize()
    print(f"M={m} N={n} K={k} on {torch.cuda.get_device_name()} (torch {torch.__version__})")
    print(f"  GPU time per replay (events over 100 back to back): {ev0.elapsed_time(ev1) * 10:.1f} us")
    for name, fn in rows:
        print(f"  {name:60s} {median_us(fn):8.1f} us host (median of 2000)")


def _ctx(stream):
    with torch.cuda.stream(stream):
        pass


if __name__ == "__main__":
    main()
