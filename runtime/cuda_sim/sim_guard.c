/* Contract: under AddressSanitizer, guarded memory faults with ASan's
 * report on the first access (from a kernel, which is instrumented too, or
 * from the host) until allowed again; elsewhere nothing happens. ASan
 * tracks memory in 8-byte granules whose readable bytes are a prefix: a
 * guarded range should start 8-byte aligned, and an allowed range that
 * starts inside a granule makes the granule's bytes before it readable
 * too (its end is exact). */
#include "runtime/cuda_sim/sim_internal.h"

#if SIM_ASAN
#include <sanitizer/asan_interface.h>

void sim_guard(void *p, size_t n) { __asan_poison_memory_region(p, n); }
void sim_allow(void *p, size_t n) { __asan_unpoison_memory_region(p, n); }
#else
void sim_guard(void *p, size_t n) { (void)p, (void)n; }
void sim_allow(void *p, size_t n) { (void)p, (void)n; }
#endif

int sim_checks_bounds(void) { return SIM_ASAN; }
