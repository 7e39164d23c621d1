"""noop_gemm.py: a GEMM module that does nothing but what dequant_matmul.py's run does before it
replays its graph (the key of its (A, C) pair, one dict lookup): bench_python_shim times the shim's
own cost per call with it."""
NAME = "noop-gemm"
OUTPUT_DTYPE = "bfloat16"


class Handle:
    def __init__(self):
        self.graphs = {}


def prepare(problem, stream):
    return Handle()


def run(handle, A, C, stream):
    handle.graphs.get((A.data_ptr, A.byte_offset, A.shape, C.data_ptr, C.byte_offset, C.shape))


def teardown(handle, stream):
    handle.graphs = {}
