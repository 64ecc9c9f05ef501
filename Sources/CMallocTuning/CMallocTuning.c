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

#if defined(__linux__)
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

long latchkey_release_clean_file_pages(void) {
    enum { most = 8192 };
    static unsigned long starts[most], ends[most];
    static long resident[most];
    FILE *smaps = fopen("/proc/self/smaps", "r");
    if (smaps == NULL) return 0;
    char line[4096];
    int count = 0, candidate = 0;
    long rss = 0;
    // A mapping qualifies when it maps a file (inode not 0), is not writable, and holds no page of its own: a page
    // written once (a relocation in RELRO data) is anonymous, and dropping it would lose the write.
    while (fgets(line, sizeof line, smaps) != NULL) {
        unsigned long start, end, inode;
        char permissions[5];
        if (sscanf(line, "%lx-%lx %4s %*s %*s %lu", &start, &end, permissions, &inode) == 4) {
            candidate = count < most && inode != 0 && permissions[1] != 'w';
            if (candidate) {
                starts[count] = start;
                ends[count] = end;
                resident[count] = 0;
                count++;
            }
        } else if (candidate && strncmp(line, "Rss:", 4) == 0) {
            sscanf(line + 4, "%ld", &resident[count - 1]);
        } else if (candidate && strncmp(line, "Anonymous:", 10) == 0) {
            long anonymous = 0;
            sscanf(line + 10, "%ld", &anonymous);
            if (anonymous != 0) {
                count--;
                candidate = 0;
            }
        }
    }
    fclose(smaps);
    for (int index = 0; index < count; index++) {
        if (madvise((void *)starts[index], ends[index] - starts[index], MADV_DONTNEED) == 0) rss += resident[index];
    }
    return rss;
}
#else
long latchkey_release_clean_file_pages(void) { return 0; }
#endif
