// shim/cooperative_groups.h: nothing the emulated (cluster-free) kernels use.
#pragma once
namespace cooperative_groups {}
