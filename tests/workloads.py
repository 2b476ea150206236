"""The known workloads tests profile: busy() spins on the CPU, nap() sleeps. ``SOURCE`` is the same
code for a kernel to run."""
import inspect
import time


def busy(t=0.3):
    end = time.perf_counter() + t
    while time.perf_counter() < end:
        pass


def nap(t=0.6):
    time.sleep(t)


SOURCE = "import time\n" + inspect.getsource(busy) + inspect.getsource(nap)
