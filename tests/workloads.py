"""The known workloads tests profile: busy() spins on the CPU for a wall time, spin() for a CPU
time (the same CPU however loaded the machine is), nap() sleeps. ``SOURCE`` is the same code for a
kernel to run."""
import inspect
import time


def busy(t=0.3):
    end = time.perf_counter() + t
    while time.perf_counter() < end:
        pass


def spin(t=0.3):
    end = time.thread_time() + t
    while time.thread_time() < end:
        pass


def nap(t=0.6):
    time.sleep(t)


SOURCE = "import time\n" + inspect.getsource(busy) + inspect.getsource(spin) + inspect.getsource(nap)

# The memory cell of issue 20: alloc() keeps 20,000 x 1 kB bytearrays alive; strs() makes 100,000 short
# strings and drops them before the peak.
MEMORY_SOURCE = '''\
def alloc():
    return [bytearray(1000) for _ in range(20000)]

def strs():
    x = [str(i) * 3 for i in range(100000)]
    del x

def cell():
    strs()
    return alloc()
'''
