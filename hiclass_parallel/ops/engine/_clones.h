/* CLONES: compile a hot function twice, for x86-64-v3 (AVX2 + FMA) and for the baseline, and
 * pick the version when the library loads, so one wheel runs everywhere and uses the wide units
 * where the CPU has them.
 *
 * Why "arch=x86-64-v3" and not "arch=haswell": GCC dispatches an "arch=<cpu>" clone only when
 * the CPU *is* that model (__builtin_cpu_is), so on any newer Xeon (the development machine's,
 * with AVX-512) the haswell clone never ran and every kernel ran its SSE2 baseline (seen with
 * perf: back_task.default). An ISA level is dispatched on the CPU's features instead. GCC
 * accepts it in target_clones from version 12; older compilers get an AVX2 clone (without FMA
 * contraction) rather than none. AVX-512 clones (x86-64-v4) measured no faster: these loops wait
 * on memory. */
#ifndef HICLASS_PARALLEL_CLONES_H
#define HICLASS_PARALLEL_CLONES_H

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && __GNUC__ >= 12
#define CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#elif defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CLONES
#endif

#endif
