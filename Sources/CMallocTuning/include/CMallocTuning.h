#ifndef C_MALLOC_TUNING_H
#define C_MALLOC_TUNING_H

/// Whether glibc's malloc was tuned for a long-running server when the process started (see CMallocTuning.c).
int latchkey_malloc_tuned(void);

/// Drops this process's mappings of file pages it never wrote (machine code, read-only data) from its page tables,
/// and returns how many kilobytes were resident in them. The pages stay in the kernel's page cache: those still
/// used fault back in. Called once start-up is over, it leaves out of the resident set the code only start-up ran.
/// Linux only (0 elsewhere).
long latchkey_release_clean_file_pages(void);

#endif
