/* A pthread without Python state: alternates a busy loop and nanosleep, about half each.
 * Built by the tests with gcc into a shared object and loaded with ctypes. */
#include <pthread.h>
#include <time.h>

static pthread_t worker;
static volatile int stop_flag;
static volatile double sink;
static double busy_ms, sleep_ms;
static int cycles;
static volatile double busy_total_ms, sleep_total_ms;  /* measured wall time in each phase */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) void cthread_busy(double ms)
{
    /* Spin for `ms` of wall time: the wall-clock shares are then exact (runnable counts as R). */
    double end = now_ms() + ms, x = 0;
    while (now_ms() < end)
        for (int i = 0; i < 2000; i++)
            x += i * 0.5;
    sink = x;
}

__attribute__((noinline)) void cthread_sleep(double ms)
{
    struct timespec ts = {(time_t)(ms / 1e3), (long)((ms - (long)(ms / 1e3) * 1e3) * 1e6)};
    nanosleep(&ts, 0);
}

/* Each phase lasts its mean times a factor drawn from [0.5, 1.5), so that a sampler at a
 * fixed rate cannot lock onto the cycle. */
static double jitter(unsigned *seed)
{
    *seed = *seed * 1103515245u + 12345u;
    return 0.5 + ((*seed >> 8) & 0xffff) / 65536.0;
}

static void *cthread_main(void *arg)
{
    unsigned seed = 12345;
    (void)arg;
    busy_total_ms = sleep_total_ms = 0;
    for (int i = 0; (cycles <= 0 || i < cycles) && !stop_flag; i++) {
        double a = now_ms();
        cthread_busy(busy_ms * jitter(&seed));
        double b = now_ms();
        cthread_sleep(sleep_ms * jitter(&seed));
        busy_total_ms += b - a;
        sleep_total_ms += now_ms() - b;
    }
    return 0;
}

/* Start the worker: `n` cycles of busy then sleep (n <= 0: until cthread_stop). */
int cthread_start(double busy, double sleep, int n)
{
    busy_ms = busy;
    sleep_ms = sleep;
    cycles = n;
    stop_flag = 0;
    return pthread_create(&worker, 0, cthread_main, 0);
}

/* Wait for the worker to finish (the ctypes call a Python thread waits in). */
int cthread_join(void)
{
    return pthread_join(worker, 0);
}

int cthread_stop(void)
{
    stop_flag = 1;
    return pthread_join(worker, 0);
}

double cthread_busy_total_ms(void) { return busy_total_ms; }
double cthread_sleep_total_ms(void) { return sleep_total_ms; }
