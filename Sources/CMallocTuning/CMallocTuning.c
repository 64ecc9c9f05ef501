#include "CMallocTuning.h"

#include <stdlib.h>  // defines __GLIBC__ with glibc

#if defined(__linux__) && defined(__GLIBC__)
#include <malloc.h>
#include <sys/sysinfo.h>

static int tuned = 0;

// Runs before main, before any thread has an arena. Blocks of 128 KiB and more (a cache's table, say) are mapped on
// their own and unmapped when freed; setting the threshold also stops glibc from raising it after each large free
// until such blocks come from the heap, where freed memory stays resident (RSS grew in steps of 3-6 MB in a soak).
// One arena per core instead of eight. An operator's GLIBC_TUNABLES wins.
__attribute__((constructor)) static void latchkey_tune_malloc(void) {
    if (getenv("GLIBC_TUNABLES") != NULL) return;
    int cores = get_nprocs();
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    mallopt(M_ARENA_MAX, cores < 2 ? 2 : cores);
    tuned = 1;
}

int latchkey_malloc_tuned(void) { return tuned; }
#else
int latchkey_malloc_tuned(void) { return 0; }
#endif
