// The case study's C++ component: a task queue drained by one std::thread worker that holds
// no Python state. The Python side submits ops and blocks in wait() (like tensor.numpy() or
// tensor.shape). Each op first calls get_device_properties(), a stand-in for
// cudaGetDeviceProperties: it takes a lock shared by every process (flock on one file) and holds
// it for a moment, so its cost grows with the number of processes. With cache=1 it is called once.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <mutex>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/file.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

#define NOINLINE __attribute__((noinline))

struct DeviceProperties {
    int multiprocessors;
    long total_memory;
};

struct Op {
    uint64_t id;
    int k;
};

struct Engine {
    int lock_fd;
    long hold_ns;
    int cache;
    int n;
    std::vector<float> data;
    std::deque<Op> queue;
    std::mutex mu;
    std::condition_variable has_work, done_cv;
    uint64_t next_id = 1, done_upto = 0;
    std::vector<std::vector<float>> results;   // results[id]: the op's output
    bool stop = false;
    bool have_props = false;
    DeviceProperties props{};
    long props_calls = 0;
    long worker_tid = 0;
    std::thread worker;
};

extern "C" {

// Takes the machine-wide lock and holds it for hold_ns: the contended driver call.
NOINLINE void get_device_properties(Engine *e, DeviceProperties *out) {
    flock(e->lock_fd, LOCK_EX);
    struct timespec ts = {e->hold_ns / 1000000000L, e->hold_ns % 1000000000L};
    nanosleep(&ts, nullptr);
    out->multiprocessors = 80;
    out->total_memory = 16L << 30;
    flock(e->lock_fd, LOCK_UN);
    e->props_calls++;
}

// The operator's real work: the k largest values of the engine's data (on-CPU).
NOINLINE void topk(Engine *e, int k, std::vector<float> *out) {
    std::vector<float> v(e->data);
    k = std::min<int>(std::max(k, 1), (int)v.size());
    std::partial_sort(v.begin(), v.begin() + k, v.end(), [](float a, float b) { return a > b; });
    out->assign(v.begin(), v.begin() + k);
}

NOINLINE void run_op(Engine *e, const Op &op, std::vector<float> *out) {
    if (!e->cache || !e->have_props) {   // the bug: asked again for every op
        get_device_properties(e, &e->props);
        e->have_props = true;
    }
    topk(e, op.k, out);
}

NOINLINE void worker_loop(Engine *e) {
    pthread_setname_np(pthread_self(), "cs-worker");
    {
        std::lock_guard<std::mutex> lk(e->mu);
        e->worker_tid = (long)syscall(SYS_gettid);
    }
    e->done_cv.notify_all();
    for (;;) {
        Op op;
        {
            std::unique_lock<std::mutex> lk(e->mu);
            e->has_work.wait(lk, [e] { return e->stop || !e->queue.empty(); });
            if (e->queue.empty()) return;
            op = e->queue.front();
            e->queue.pop_front();
        }
        std::vector<float> out;
        run_op(e, op, &out);
        {
            std::lock_guard<std::mutex> lk(e->mu);
            if (e->results.size() <= op.id) e->results.resize(op.id + 1);
            e->results[op.id].swap(out);
            e->done_upto = op.id;
        }
        e->done_cv.notify_all();
    }
}

void *cs_create(const char *lock_path, double hold_ms, int cache, int n) {
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return nullptr;
    Engine *e = new Engine();
    e->lock_fd = fd;
    e->hold_ns = (long)(hold_ms * 1e6);
    e->cache = cache;
    e->n = n;
    e->data.resize(n);
    uint32_t x = 12345;
    for (auto &f : e->data) { x = x * 1664525u + 1013904223u; f = (float)(x >> 8); }
    e->worker = std::thread(worker_loop, e);
    return e;
}

uint64_t cs_submit(void *h, int k) {
    Engine *e = (Engine *)h;
    uint64_t id;
    {
        std::lock_guard<std::mutex> lk(e->mu);
        id = e->next_id++;
        e->queue.push_back(Op{id, k});
    }
    e->has_work.notify_one();
    return id;
}

// Blocks until op `id` is done; returns its output length and copies up to cap values.
int cs_wait(void *h, uint64_t id, float *buf, int cap) {
    Engine *e = (Engine *)h;
    std::unique_lock<std::mutex> lk(e->mu);
    e->done_cv.wait(lk, [e, id] { return e->done_upto >= id; });
    const std::vector<float> &r = e->results[id];
    int n = (int)r.size();
    if (buf) memcpy(buf, r.data(), sizeof(float) * std::min(n, cap));
    return n;
}

long cs_props_calls(void *h) { return ((Engine *)h)->props_calls; }

long cs_worker_tid(void *h) {
    Engine *e = (Engine *)h;
    std::unique_lock<std::mutex> lk(e->mu);
    e->done_cv.wait(lk, [e] { return e->worker_tid != 0; });
    return e->worker_tid;
}

void cs_destroy(void *h) {
    Engine *e = (Engine *)h;
    {
        std::lock_guard<std::mutex> lk(e->mu);
        e->stop = true;
    }
    e->has_work.notify_all();
    e->worker.join();
    close(e->lock_fd);
    delete e;
}

}  // extern "C"
