/* Sampled allocation tracker (profmagic.backends.memsample): wraps Python's allocator domains and,
 * optionally, numpy's data allocator; samples allocations by bytes (a Poisson process of mean
 * `interval` bytes), keeps each sampled pointer until its free, and logs sampled allocations and
 * frees with the allocating Python stack. No profile function. Built at first use (cbuild.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
#define Py_BUILD_CORE 1
#include "internal/pycore_frame.h"
#undef Py_BUILD_CORE
#define MS_INTERNAL_FRAMES 1
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>
#ifdef MS_NUMPY
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#include <numpy/arrayobject.h>
#endif

#define MAX_DEPTH 128
#define TLS __thread __attribute__((tls_model("initial-exec")))

typedef struct { int64_t t_ns; int64_t size; double weight; uint32_t stack; uint32_t tid; } event_t;
typedef struct { void *ptr; int64_t size; double weight; uint32_t stack; uint32_t tid; } live_t;
typedef struct { PyCodeObject *code; int lasti; } frame_t;   /* lasti: the instruction's offset in bytes */
typedef struct { uint64_t hash; uint32_t start, depth; } stack_t_;

typedef struct { int64_t countdown; uint64_t rng; int in_hook; int seeded; uint32_t tid; } tls_t;
static TLS tls_t tls;

static volatile int enabled = 0;
static double interval = 262144.0;
static int lock_word = 0;

static PyMemAllocatorEx orig_mem, orig_obj, orig_raw;
static int hooked = 0, raw_hooked = 0, stuck = 0;

/* event log */
static event_t *events = NULL;
static size_t n_events = 0, cap_events = 0;
static int64_t t0_ns = 0;
static uint64_t lost = 0;    /* events not logged: no memory for the log */
static uint64_t filter_misses = 0;   /* frees the filter let through for a pointer not live (under the lock) */
/* live sampled pointers: open addressing, linear probing, backward-shift deletion */
static live_t *live = NULL;
static size_t live_cap = 0, live_n = 0;
/* A counting filter over the live sampled pointers: a free whose slot counts 0 was never sampled.
 * Counting, so that a slot empties when its pointers are freed: pymalloc hands a freed block out
 * again at once, and a hot address once sampled made every later free of it take the lock. */
#define BLOOM_SLOTS (1u << 18)
static uint8_t bloom[BLOOM_SLOTS];
/* stacks: frames laid end to end, and a hash index over them */
static frame_t *frames = NULL;
static size_t n_frames = 0, cap_frames = 0;
static stack_t_ *stacks = NULL;
static size_t n_stacks = 0, cap_stacks = 0;
static uint32_t *stack_index = NULL;   /* stack id + 1, 0 = empty */
static size_t index_cap = 0;
/* exact counts (MEM and OBJ domains, GIL held) */
static uint64_t n_calls = 0;
static uint64_t n_samples = 0;

static inline void lock(void) { while (__atomic_exchange_n(&lock_word, 1, __ATOMIC_ACQUIRE)) { } }
static inline void unlock(void) { __atomic_store_n(&lock_word, 0, __ATOMIC_RELEASE); }

static inline uint64_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static double next_interval(void) {
    if (tls.rng == 0) tls.rng = mix((uint64_t)(uintptr_t)&tls ^ (uint64_t)now_ns()) | 1;
    tls.rng ^= tls.rng >> 12; tls.rng ^= tls.rng << 25; tls.rng ^= tls.rng >> 27;
    double u = ((tls.rng * 0x2545F4914F6CDD1DULL) >> 11) * (1.0 / 9007199254740992.0);
    return -log(1.0 - u) * interval;
}

static uint32_t my_tid(void) {
    if (tls.tid == 0) tls.tid = (uint32_t)syscall(SYS_gettid);
    return tls.tid;
}

/* -- stacks (GIL held) ------------------------------------------------------------------------- */
static int grow(void **buf, size_t *cap, size_t need, size_t item) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    void *p = realloc(*buf, c * item);
    if (!p) return -1;
    *buf = p; *cap = c;
    return 0;
}

static int index_put(uint32_t id);

static int index_grow(void) {
    size_t c = index_cap ? index_cap * 2 : 4096;
    uint32_t *n = calloc(c, sizeof(uint32_t));
    if (!n) return -1;
    free(stack_index);
    stack_index = n; index_cap = c;
    for (uint32_t i = 0; i < n_stacks; i++) index_put(i);
    return 0;
}

static int index_put(uint32_t id) {
    size_t m = index_cap - 1, i = stacks[id].hash & m;
    while (stack_index[i]) i = (i + 1) & m;
    stack_index[i] = id + 1;
    return 0;
}

/* The current thread's stack as a stack id (0: no Python frames). Allocates only with libc. */
static uint32_t capture_stack(void) {
    frame_t buf[MAX_DEPTH];
    int depth = 0;
    PyThreadState *ts = PyGILState_GetThisThreadState();
    if (ts == NULL) return 0;
#ifdef MS_INTERNAL_FRAMES
#if PY_VERSION_HEX >= 0x030C0000
    _PyInterpreterFrame *f = ts->cframe ? ts->cframe->current_frame : NULL;
#else
    _PyInterpreterFrame *f = ts->cframe ? ts->cframe->current_frame : NULL;
#endif
    for (; f != NULL && depth < MAX_DEPTH; f = f->previous) {
#if PY_VERSION_HEX >= 0x030C0000
        if (f->owner == FRAME_OWNED_BY_CSTACK) continue;
#endif
        if (_PyFrame_IsIncomplete(f)) continue;
        buf[depth].code = f->f_code;
        buf[depth].lasti = _PyInterpreterFrame_LASTI(f) * (int)sizeof(_Py_CODEUNIT);   /* bytes */
        depth++;
    }
#else
    PyFrameObject *f = PyThreadState_GetFrame(ts);   /* allocates: our hooks pass (in_hook) */
    while (f != NULL && depth < MAX_DEPTH) {
        PyCodeObject *c = PyFrame_GetCode(f);
        buf[depth].code = c; buf[depth].lasti = PyFrame_GetLasti(f);
        Py_DECREF(c);   /* the frame keeps it; stored stacks take their own reference below */
        depth++;
        PyFrameObject *b = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = b;
    }
    Py_XDECREF(f);
#endif
    if (depth == 0) return 0;
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < depth; i++)
        h = mix(h ^ ((uint64_t)(uintptr_t)buf[i].code * 31 + (uint64_t)buf[i].lasti));
    if (n_stacks * 2 >= index_cap && index_grow() < 0) return 0;
    size_t m = index_cap - 1, i = h & m;
    while (stack_index[i]) {
        stack_t_ *s = &stacks[stack_index[i] - 1];
        if (s->hash == h && s->depth == (uint32_t)depth &&
            memcmp(&frames[s->start], buf, depth * sizeof(frame_t)) == 0)
            return stack_index[i];   /* ids count from 1: 0 is "no stack" */
        i = (i + 1) & m;
    }
    if (grow((void **)&frames, &cap_frames, n_frames + depth, sizeof(frame_t)) < 0 ||
        grow((void **)&stacks, &cap_stacks, n_stacks + 1, sizeof(stack_t_)) < 0) return 0;
    memcpy(&frames[n_frames], buf, depth * sizeof(frame_t));
    for (int k = 0; k < depth; k++) Py_INCREF(buf[k].code);
    stacks[n_stacks].hash = h; stacks[n_stacks].start = (uint32_t)n_frames; stacks[n_stacks].depth = depth;
    n_frames += depth;
    stack_index[i] = (uint32_t)n_stacks + 1;
    n_stacks++;
    return (uint32_t)n_stacks;
}

/* -- live table and log (under the lock) ----------------------------------------------------------- */
static inline size_t slot(void *p, size_t m) { return (size_t)mix((uint64_t)(uintptr_t)p) & m; }
static inline uint64_t bloom_slot(void *p) { return ((uint64_t)(uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ULL >> 46; }

static void log_event(int64_t size, double weight, uint32_t stack, uint32_t tid) {
    if (grow((void **)&events, &cap_events, n_events + 1, sizeof(event_t)) < 0) { lost++; return; }
    event_t *e = &events[n_events++];
    e->t_ns = now_ns() - t0_ns; e->size = size; e->weight = weight; e->stack = stack; e->tid = tid;
}

static void live_insert(void *p, int64_t size, double w, uint32_t stack, uint32_t tid) {
    if ((live_n + 1) * 2 > live_cap) {
        size_t c = live_cap ? live_cap * 2 : 1024;
        live_t *n = calloc(c, sizeof(live_t));
        if (!n) { lost++; return; }
        for (size_t j = 0; j < live_cap; j++) {
            if (!live[j].ptr) continue;
            size_t k = slot(live[j].ptr, c - 1);
            while (n[k].ptr) k = (k + 1) & (c - 1);
            n[k] = live[j];
        }
        free(live); live = n; live_cap = c;
    }
    size_t m = live_cap - 1, i = slot(p, m);
    while (live[i].ptr) i = (i + 1) & m;
    live[i].ptr = p; live[i].size = size; live[i].weight = w; live[i].stack = stack; live[i].tid = tid;
    live_n++;
    uint8_t *c = &bloom[bloom_slot(p)];
    if (*c != UINT8_MAX) __atomic_store_n(c, (uint8_t)(*c + 1), __ATOMIC_RELAXED);   /* a full slot stays full */
}

static void live_remove(void *p) {
    if (!live_cap) return;
    size_t m = live_cap - 1, i = slot(p, m);
    while (live[i].ptr && live[i].ptr != p) i = (i + 1) & m;
    if (!live[i].ptr) { filter_misses++; return; }
    uint8_t *c = &bloom[bloom_slot(p)];
    if (*c != UINT8_MAX) __atomic_store_n(c, (uint8_t)(*c - 1), __ATOMIC_RELAXED);
    live_t e = live[i];
    log_event(-e.size, -e.weight, e.stack, e.tid);
    /* backward-shift deletion */
    size_t j = i;
    for (;;) {
        live[i].ptr = NULL;
        for (;;) {
            j = (j + 1) & m;
            if (!live[j].ptr) { live_n--; return; }
            size_t k = slot(live[j].ptr, m);
            if ((i <= j) ? (i < k && k <= j) : (i < k || k <= j)) continue;
            break;
        }
        live[i] = live[j];
        i = j;
    }
}

/* -- the hooks --------------------------------------------------------------------------------- */
static inline void on_free(void *p) {
    if (!p) return;
    if (!__atomic_load_n(&bloom[bloom_slot(p)], __ATOMIC_RELAXED)) return;
    lock(); live_remove(p); unlock();
}

static void sample(void *p, size_t size) {
    double s = (double)size;
    double prob = 1.0 - exp(-s / interval);
    double w = prob > 0 ? s / prob : interval;
    uint32_t stack = PyGILState_Check() ? capture_stack() : 0;
    uint32_t tid = my_tid();
    lock();
    n_samples++;
    log_event((int64_t)size, w, stack, tid);
    live_insert(p, (int64_t)size, w, stack, tid);
    unlock();
}

static inline void on_alloc(void *p, size_t size) {
    if (!p || !enabled) return;
    if (!tls.seeded) { tls.seeded = 1; tls.countdown = (int64_t)next_interval(); }   /* a thread's first */
    tls.countdown -= (int64_t)size;
    if (tls.countdown > 0) return;
    tls.in_hook++;
    tls.countdown = (int64_t)next_interval();
    sample(p, size);
    tls.in_hook--;
}

#define HOOKS(NAME, ORIG, COUNT)                                                                     \
static void *NAME##_malloc(void *ctx, size_t n) {                                                   \
    if (tls.in_hook) return ORIG.malloc(ORIG.ctx, n);                                               \
    tls.in_hook++; void *p = ORIG.malloc(ORIG.ctx, n); tls.in_hook--;                               \
    COUNT; on_alloc(p, n); return p;                                                                \
}                                                                                                   \
static void *NAME##_calloc(void *ctx, size_t k, size_t n) {                                         \
    if (tls.in_hook) return ORIG.calloc(ORIG.ctx, k, n);                                            \
    tls.in_hook++; void *p = ORIG.calloc(ORIG.ctx, k, n); tls.in_hook--;                            \
    COUNT; on_alloc(p, k * n); return p;                                                            \
}                                                                                                   \
static void *NAME##_realloc(void *ctx, void *old, size_t n) {                                       \
    if (tls.in_hook) return ORIG.realloc(ORIG.ctx, old, n);                                         \
    tls.in_hook++; void *p = ORIG.realloc(ORIG.ctx, old, n); tls.in_hook--;                         \
    if (p) { on_free(old); COUNT; on_alloc(p, n); }                                                 \
    return p;                                                                                       \
}                                                                                                   \
static void NAME##_free(void *ctx, void *p) {                                                       \
    if (!tls.in_hook) on_free(p);                                                                   \
    ORIG.free(ORIG.ctx, p);                                                                         \
}

HOOKS(mem, orig_mem, n_calls++)
HOOKS(obj, orig_obj, n_calls++)
HOOKS(raw, orig_raw, (void)0)

static PyMemAllocatorEx hook_mem = {NULL, mem_malloc, mem_calloc, mem_realloc, mem_free};
static PyMemAllocatorEx hook_obj = {NULL, obj_malloc, obj_calloc, obj_realloc, obj_free};
static PyMemAllocatorEx hook_raw = {NULL, raw_malloc, raw_calloc, raw_realloc, raw_free};

#ifdef MS_NUMPY
/* numpy's data buffers (NEP 49 handler): malloc/free of libc, seen like the domains' allocations.
 * An array keeps the handler that made it, so its free comes here even after stop. */
static void *np_malloc(void *ctx, size_t n) {
    if (tls.in_hook) return malloc(n);
    tls.in_hook++; void *p = malloc(n); tls.in_hook--;
    on_alloc(p, n); return p;
}
static void *np_calloc(void *ctx, size_t k, size_t n) {
    if (tls.in_hook) return calloc(k, n);
    tls.in_hook++; void *p = calloc(k, n); tls.in_hook--;
    on_alloc(p, k * n); return p;
}
static void *np_realloc(void *ctx, void *old, size_t n) {
    if (tls.in_hook) return realloc(old, n);
    tls.in_hook++; void *p = realloc(old, n); tls.in_hook--;
    if (p) { on_free(old); on_alloc(p, n); }
    return p;
}
static void np_free(void *ctx, void *p, size_t size) {
    if (!tls.in_hook) on_free(p);
    free(p);
}
static PyDataMem_Handler np_handler = {"profmagic_memsample", 1,
                                       {NULL, np_malloc, np_calloc, np_realloc, np_free}};
static PyObject *np_capsule = NULL;
static PyObject *np_previous = NULL;
static int np_ready = 0;
#endif

/* -- module functions ------------------------------------------------------------------------- */
static void clear_log(void) {
    lock();   /* a RAW hook entered just before it was removed may still be running */
    free(events); events = NULL; n_events = cap_events = 0;
    free(live); live = NULL; live_cap = live_n = 0;
    memset(bloom, 0, sizeof(bloom));
    unlock();
    for (size_t i = 0; i < n_frames; i++) Py_DECREF(frames[i].code);
    free(frames); frames = NULL; n_frames = cap_frames = 0;
    free(stacks); stacks = NULL; n_stacks = cap_stacks = 0;
    free(stack_index); stack_index = NULL; index_cap = 0;
    n_calls = n_samples = lost = filter_misses = 0;
}

static PyObject *ms_start(PyObject *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"interval", "raw", "numpy", NULL};
    double iv = 262144.0;
    int raw = 0, np = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|dpp", names, &iv, &raw, &np)) return NULL;
    if (hooked) { PyErr_SetString(PyExc_RuntimeError, "the sampled tracker is already running"); return NULL; }
    if (stuck) {
        PyErr_SetString(PyExc_RuntimeError, "another allocator hook (tracemalloc?) was installed over the sampled "
                        "tracker while it ran, so its hooks stay in place in this process; restart the kernel");
        return NULL;
    }
    if (!(iv >= 1.0)) { PyErr_SetString(PyExc_ValueError, "interval must be at least 1 byte"); return NULL; }
    clear_log();
    interval = iv;
    t0_ns = now_ns();
#ifdef MS_NUMPY
    if (np) {
        if (!np_ready) {
            if (_import_array() < 0) return NULL;
            np_capsule = PyCapsule_New(&np_handler, "mem_handler", NULL);
            if (!np_capsule) return NULL;
            np_ready = 1;
        }
        np_previous = PyDataMem_SetHandler(np_capsule);
        if (!np_previous) return NULL;
    }
#else
    if (np) { PyErr_SetString(PyExc_RuntimeError, "built without numpy's headers"); return NULL; }
#endif
    tls.countdown = (int64_t)next_interval();
    tls.seeded = 1;
    PyMem_GetAllocator(PYMEM_DOMAIN_MEM, &orig_mem);
    PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &orig_obj);
    PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &hook_mem);
    PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &hook_obj);
    if (raw) {
        PyMem_GetAllocator(PYMEM_DOMAIN_RAW, &orig_raw);
        PyMem_SetAllocator(PYMEM_DOMAIN_RAW, &hook_raw);
        raw_hooked = 1;
    }
    hooked = 1;
    enabled = 1;
    Py_RETURN_NONE;
}

/* stop() -> (events bytes, stacks [[(qualname, file, line), ...] leaf first], info dict) */
static PyObject *ms_stop(PyObject *self, PyObject *unused) {
    if (!hooked) { PyErr_SetString(PyExc_RuntimeError, "the sampled tracker is not running"); return NULL; }
    enabled = 0;
    /* Restoring is safe: every hook forwards to the allocator it replaced. A domain whose allocator is
     * no longer ours (tracemalloc started inside, wrapping ours) keeps our hooks, disabled, forwarding;
     * the tracker then refuses to start again in this process (its saved allocators are in use). */
    PyMemAllocatorEx cur;
    int ours = 1;
    PyMem_GetAllocator(PYMEM_DOMAIN_MEM, &cur); ours &= cur.malloc == mem_malloc;
    PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &cur); ours &= cur.malloc == obj_malloc;
    if (raw_hooked) { PyMem_GetAllocator(PYMEM_DOMAIN_RAW, &cur); ours &= cur.malloc == raw_malloc; }
    if (ours) {
        PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &orig_mem);
        PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &orig_obj);
        if (raw_hooked) PyMem_SetAllocator(PYMEM_DOMAIN_RAW, &orig_raw);
    } else {
        stuck = 1;
    }
    raw_hooked = 0;
    hooked = 0;
#ifdef MS_NUMPY
    if (np_previous) {
        PyObject *mine = PyDataMem_SetHandler(np_previous);
        Py_XDECREF(mine);
        Py_CLEAR(np_previous);
    }
#endif
    lock();
    size_t ne = n_events;
    PyObject *ev = PyBytes_FromStringAndSize((const char *)events, (Py_ssize_t)(ne * sizeof(event_t)));
    unlock();
    if (!ev) return NULL;
    PyObject *st = PyList_New((Py_ssize_t)n_stacks);
    if (!st) { Py_DECREF(ev); return NULL; }
    for (size_t s = 0; s < n_stacks; s++) {
        PyObject *fl = PyList_New(stacks[s].depth);
        if (!fl) goto fail;
        PyList_SET_ITEM(st, s, fl);
        for (uint32_t k = 0; k < stacks[s].depth; k++) {
            frame_t *f = &frames[stacks[s].start + k];
            PyObject *name = PyObject_GetAttrString((PyObject *)f->code, "co_qualname");
            if (!name) { PyErr_Clear(); name = f->code->co_name; Py_INCREF(name); }
            int line = PyCode_Addr2Line(f->code, f->lasti);
            PyObject *t = Py_BuildValue("(NOi)", name, f->code->co_filename, line);
            if (!t) goto fail;
            PyList_SET_ITEM(fl, k, t);
        }
    }
    PyObject *info = Py_BuildValue("{s:d,s:K,s:K,s:K,s:K,s:n,s:L,s:L}", "interval", interval, "calls",
                                   (unsigned long long)n_calls, "samples", (unsigned long long)n_samples,
                                   "lost", (unsigned long long)lost, "filter_misses", (unsigned long long)filter_misses,
                                   "live_at_stop", (Py_ssize_t)live_n,
                                   "event_size", (long long)sizeof(event_t), "t0_ns", (long long)t0_ns);
    if (!info) goto fail;
    clear_log();
    return Py_BuildValue("(NNN)", ev, st, info);
fail:
    Py_DECREF(ev); Py_DECREF(st);
    return NULL;
}

static PyObject *ms_running(PyObject *self, PyObject *unused) { return PyBool_FromLong(hooked); }

static PyObject *ms_has_numpy(PyObject *self, PyObject *unused) {
#ifdef MS_NUMPY
    Py_RETURN_TRUE;
#else
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
    {"start", (PyCFunction)(void (*)(void))ms_start, METH_VARARGS | METH_KEYWORDS,
     "start(interval=262144.0, raw=False, numpy=False): wrap the allocators and sample."},
    {"stop", ms_stop, METH_NOARGS, "stop() -> (events, stacks, info); restores the allocators."},
    {"running", ms_running, METH_NOARGS, "Whether the tracker runs."},
    {"has_numpy", ms_has_numpy, METH_NOARGS, "Whether numpy's data allocator can be wrapped."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_memsample", NULL, -1, methods};

PyMODINIT_FUNC PyInit__memsample(void) { return PyModule_Create(&module); }
