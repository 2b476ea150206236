/* A pure C thread with known truth: it alternates busy work and nanosleep and measures both.
 * Built by bench/groundtruth.py into bench/data/: gcc -O1 -fno-inline -shared -fPIC -pthread cworker.c -o cworker.so */
#define _GNU_SOURCE
#include <pthread.h>
#include <unistd.h>
#include <stdint.h>
#include <time.h>

static double now(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* [0] c_busy wall, [1] c_busy cpu, [2] c_sleep wall, [3] c_sleep cpu, [4] thread wall, [5] thread cpu,
 * [6] native thread id */
static double result[7];
static double busy_s, sleep_s, total_s;
static pthread_t th;
volatile uint64_t sink;

__attribute__((noinline)) void c_busy(double seconds) {
    double end = now(CLOCK_THREAD_CPUTIME_ID) + seconds;
    uint64_t x = 1;
    while (now(CLOCK_THREAD_CPUTIME_ID) < end)
        for (int i = 0; i < 2000; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    sink = x;
}

__attribute__((noinline)) void c_sleep(double seconds) {
    struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
    nanosleep(&ts, 0);
}

static void *c_worker(void *arg) {
    (void)arg;
    result[6] = (double)gettid();
    double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
    while (now(CLOCK_MONOTONIC) - w0 < total_s) {
        double w = now(CLOCK_MONOTONIC), c = now(CLOCK_THREAD_CPUTIME_ID);
        c_busy(busy_s);
        result[0] += now(CLOCK_MONOTONIC) - w;
        result[1] += now(CLOCK_THREAD_CPUTIME_ID) - c;
        w = now(CLOCK_MONOTONIC); c = now(CLOCK_THREAD_CPUTIME_ID);
        c_sleep(sleep_s);
        result[2] += now(CLOCK_MONOTONIC) - w;
        result[3] += now(CLOCK_THREAD_CPUTIME_ID) - c;
    }
    result[4] = now(CLOCK_MONOTONIC) - w0;
    result[5] = now(CLOCK_THREAD_CPUTIME_ID) - c0;
    return 0;
}

int cw_start(double busy, double sleep, double total) {
    busy_s = busy; sleep_s = sleep; total_s = total;
    for (int i = 0; i < 7; i++) result[i] = 0;
    return pthread_create(&th, 0, c_worker, 0);
}

/* Joins the thread (call without the GIL: ctypes releases it) and copies the results out. */
int cw_join(double *out) {
    int rc = pthread_join(th, 0);
    for (int i = 0; i < 7; i++) out[i] = result[i];
    return rc;
}
