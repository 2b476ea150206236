"""A workload for tests/test_perf_pynames.py, run as a child: ``pynames_work.py SECONDS``. Prints
``ready``, waits for ``go`` on stdin, then: thread ``pn-holder`` takes a lock and sleeps SECONDS in
``hold_lock``; the main thread blocks on that lock in ``_take``, a private helper that
``blocked_on_lock`` calls; thread ``pn-sleeper`` sleeps SECONDS in ``_nap``, its target (a private
function that threading calls). Prints one JSON line with the native thread ids."""
import json
import sys
import threading
import time

lock = threading.Lock()
held = threading.Event()


def hold_lock(seconds):
    with lock:
        held.set()
        time.sleep(seconds)


def _nap(seconds, ids):
    ids["sleeper"] = threading.get_native_id()
    time.sleep(seconds)


def _take():
    with lock:
        pass


def blocked_on_lock():
    _take()


def main(seconds):
    ids = {"main": threading.get_native_id()}
    holder = threading.Thread(target=lambda: (ids.__setitem__("holder", threading.get_native_id()),
                                              hold_lock(seconds)), name="pn-holder")
    sleeper = threading.Thread(target=_nap, args=(seconds, ids), name="pn-sleeper")
    holder.start()
    held.wait()
    sleeper.start()
    blocked_on_lock()
    holder.join()
    sleeper.join()
    return ids


if __name__ == "__main__":
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(main(float(sys.argv[1]))), flush=True)
