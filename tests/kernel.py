"""A real Jupyter kernel driven through jupyter_client, for tests that run %%profile."""
from __future__ import annotations

import os
import queue
import sys
from dataclasses import dataclass, field

from jupyter_client.manager import KernelManager

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ipc_address() -> str:
    """A socket path of the kernel's own (see notebooks/run.py's ipc_address)."""
    import uuid
    from jupyter_core.paths import jupyter_runtime_dir
    d = jupyter_runtime_dir()
    os.makedirs(d, exist_ok=True)
    return os.path.join(d, f"kernel-{uuid.uuid4()}-ipc")


@dataclass
class Reply:
    status: str
    stdout: str = ""
    stderr: str = ""
    error: dict | None = None            # ename, evalue, traceback
    data: list = field(default_factory=list)   # display_data / execute_result bundles, in order
    updates: list = field(default_factory=list)  # update_display_data bundles
    result: dict | None = None           # the execute_result bundle

    def text(self) -> str:
        parts = [self.stdout, self.stderr]
        for d in self.data + self.updates:
            parts.append(d.get("text/plain", ""))
        return "\n".join(parts)


class Kernel:
    """One ipykernel process. ``run(code)`` executes a cell and collects what it printed and displayed."""

    def __init__(self, python: str = sys.executable, extra_env: dict | None = None, cwd: str = ROOT):
        env = dict(os.environ)
        env.update(extra_env or {})
        # ZMQ over a fresh socket path: free TCP ports picked here can be taken by another
        # process before the kernel binds them.
        self.km = KernelManager(kernel_name="python3", transport="ipc", ip=ipc_address())
        self.km.kernel_spec.argv[0] = python
        self.km.start_kernel(env=env, cwd=cwd)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    @property
    def pid(self) -> int:
        return self.km.provisioner.process.pid

    def run(self, code: str, timeout: float = 120, interrupt_after: float | None = None,
            interrupt_on=None) -> Reply:
        """Execute ``code``. ``interrupt_on``: send SIGINT once the cell is where the test wants it, as
        the workload marks it: a text it prints, or a callable that turns true (a file it writes);
        ``interrupt_after``: after so many seconds."""
        ready = (interrupt_on if callable(interrupt_on) or interrupt_on is None
                 else (lambda: interrupt_on in rep.stdout))
        msg_id = self.kc.execute(code, store_history=True)
        rep = Reply(status="?")
        import time
        t0 = time.monotonic()
        interrupted = False
        while True:
            if not interrupted and ((interrupt_after is not None and time.monotonic() - t0 > interrupt_after)
                                    or (ready is not None and ready())):
                self.km.interrupt_kernel()
                interrupted = True
            try:
                msg = self.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                if not self.km.is_alive():   # a crash, said at once, not after the timeout
                    proc = getattr(self.km.provisioner, "process", None)
                    raise RuntimeError(f"the kernel died (exit {proc.poll() if proc else '?'}; a negative "
                                       f"exit is the signal) running {code[:80]!r}")
                if time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"cell did not finish in {timeout} s: {code[:80]!r}")
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            t, c = msg["msg_type"], msg["content"]
            if t == "stream":
                if c["name"] == "stdout":
                    rep.stdout += c["text"]
                else:
                    rep.stderr += c["text"]
            elif t == "display_data":
                rep.data.append(c["data"])
            elif t == "update_display_data":
                rep.updates.append(c["data"])
            elif t == "execute_result":
                rep.data.append(c["data"])
                rep.result = c["data"]
            elif t == "error":
                rep.error = c
            elif t == "status" and c["execution_state"] == "idle":
                break
        # This request's own reply: under load, wait_for_ready() leaves extra kernel_info replies queued.
        while True:
            reply = self.kc.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        rep.status = reply["content"]["status"]
        return rep

    def value(self, expr: str):
        """Evaluate ``expr`` in the kernel and return its repr parsed back with ast.literal_eval."""
        import ast
        r = self.run(f"print(repr({expr}))")
        if r.error:
            raise RuntimeError(f"{r.error['ename']}: {r.error['evalue']}")
        return ast.literal_eval(r.stdout.strip().splitlines()[-1])

    def close(self) -> None:
        try:
            self.kc.stop_channels()
        finally:
            self.km.shutdown_kernel(now=True)
