#ifndef C_SYSTEM_RANDOM_H
#define C_SYSTEM_RANDOM_H

#include <stddef.h>

/// Fills `buffer` with `count` bytes from the operating system's random generator in as few calls as it takes
/// (one for up to 256 bytes). Returns 0, or -1 with errno set.
int latchkey_system_random(void *buffer, size_t count);

#endif
