// KVSERVE_SAMPLING_CLONES: a function attribute that compiles a function for AVX-512, AVX2 and
// the baseline, the best picked at load time (GCC's target_clones), so the sampler's loops over
// the vocabulary run 16 floats at a time where the CPU allows. Off with clang (it lacks the
// ifunc-based clones of static functions we use).
#pragma once

#if defined(__x86_64__) && !defined(__clang__)
#define KVSERVE_SAMPLING_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KVSERVE_SAMPLING_CLONES
#endif
