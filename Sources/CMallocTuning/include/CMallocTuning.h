#ifndef C_MALLOC_TUNING_H
#define C_MALLOC_TUNING_H

/// Whether glibc's malloc was tuned for a long-running server when the process started (see CMallocTuning.c).
int latchkey_malloc_tuned(void);

#endif
