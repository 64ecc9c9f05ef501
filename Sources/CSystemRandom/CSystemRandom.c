// Swift's Glibc module does not export getrandom(2), and SystemRandomNumberGenerator calls it once per 8 bytes.
#include "CSystemRandom.h"

#include <errno.h>

#if defined(__APPLE__)
#include <stdlib.h>

int latchkey_system_random(void *buffer, size_t count) {
    arc4random_buf(buffer, count);
    return 0;
}
#else
#include <sys/syscall.h>
#include <unistd.h>

int latchkey_system_random(void *buffer, size_t count) {
    size_t filled = 0;
    while (filled < count) {
        long read = syscall(SYS_getrandom, (char *)buffer + filled, count - filled, 0);
        if (read < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        filled += (size_t)read;
    }
    return 0;
}
#endif
