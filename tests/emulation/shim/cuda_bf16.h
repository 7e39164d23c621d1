// shim/cuda_bf16.h: nothing the emulated kernels use beyond the shim's cuda_runtime.h.
#pragma once

#include "cuda_runtime.h"
