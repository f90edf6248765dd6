/* clockshim: one server's wall clock jumped, for RL2 (LD_PRELOAD into redis-server).
 *
 * Shifts CLOCK_REALTIME — as gettimeofday(), clock_gettime(CLOCK_REALTIME*) and time() answer
 * it — by the milliseconds written in /tmp/clockshim-offset-ms, read again on every call (no
 * file: no shift). Every other clock (CLOCK_MONOTONIC: the server's timers) is left alone.
 *
 * Why not libfaketime: Debian's libfaketime 0.9.10 recurses in clock_gettime under the
 * jemalloc that Debian's redis-server 7.0 is linked with (its initialisation allocates, and
 * jemalloc's initialisation reads the clock). This shim initialises nothing and allocates
 * nothing: the kernel's clock by a raw system call, the offset by open/read/close system calls.
 * Redis reads its expiry clock with gettimeofday() (mstime()), so a key's TTL passes by the
 * shifted clock. Compiled by the lab on the host (`cc -shared -fPIC`), mounted read-only.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ms(void) {
    char buf[32];
    long fd = syscall(SYS_openat, AT_FDCWD, "/tmp/clockshim-offset-ms", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
    syscall(SYS_close, fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    long long v = 0;
    int negative = 0;
    const char *p = buf;
    if (*p == '-') {
        negative = 1;
        p++;
    }
    for (; *p >= '0' && *p <= '9'; p++)
        v = v * 10 + (*p - '0');
    return negative ? -v : v;
}

static void shift(struct timespec *ts) {
    long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ms() * 1000000LL;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
    long r = syscall(SYS_clock_gettime, id, ts);
    if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE))
        shift(ts);
    return (int)r;
}

int gettimeofday(struct timeval *__restrict tv, void *__restrict tz) {
    struct timespec ts;
    (void)tz;
    if (syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts) != 0)
        return -1;
    shift(&ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *t) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    if (t)
        *t = ts.tv_sec;
    return ts.tv_sec;
}
