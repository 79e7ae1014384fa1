// libhotcold_cuda.so: the CUDA backend (hc_cuda, whole) as a module the hotcold binary opens
// when a command asks for a CUDA device (ops/cuda/cuda_entry.h). Its entry point,
// hc_cuda_entry, comes from hc_cuda itself; this file only gives the module a source.
#include "ops/cuda/cuda_entry.h"
