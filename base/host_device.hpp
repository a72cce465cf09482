#pragma once
// SWEETSPOT_HOST_DEVICE marks a function that host code and GPU kernels both call, so both compute
// the same thing from one definition: __host__ __device__ under nvcc, nothing for the host compiler.
#ifdef __CUDACC__
#define SWEETSPOT_HOST_DEVICE __host__ __device__
#else
#define SWEETSPOT_HOST_DEVICE
#endif
