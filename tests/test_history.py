"""A cell's last run (issue 25 item 3), in a real ipykernel: the last-run line under the report, the
refusal when the backend changed, ``%profile --history``, the differential view, and the bounds."""
from __future__ import annotations

import os
import re

import pytest

pytestmark = [pytest.mark.timed, pytest.mark.kernel, pytest.mark.timeout(300)]

SETUP = r'''
%load_ext profmagic
import time
from profmagic import history
SLOW = [0.3]
def spin(s):
    end = time.perf_counter() + s
    while time.perf_counter() < end:
        pass
def work():
    spin(SLOW[0])
'''


def run_cell(k, code, cell_id=None):
    """Execute ``code`` as a front end does; with ``cell_id``, the request carries it in its metadata
    (JupyterLab's ``cellId``), which ipykernel hands to IPython's pre_run_cell hooks."""
    if cell_id is None:
        return k.run(code)
    kc = k.kc

    def execute(code, **kw):
        content = dict(code=code, silent=False, store_history=True, user_expressions={}, allow_stdin=False,
                       stop_on_error=True)
        msg = kc.session.msg("execute_request", content, metadata={"cellId": cell_id})
        kc.shell_channel.send(msg)
        return msg["header"]["msg_id"]
    kc.execute = execute
    try:
        return k.run(code)
    finally:
        del kc.execute


def documented(error_id: str, text: str) -> bool:
    """``text`` holds the message docs/errors.md gives under ``### `error_id` `` (… matches anything)."""
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "errors.md"), encoding="utf-8") as f:
        doc = f.read()
    block = doc.split(f"### `{error_id}`", 1)[1].split("```text\n", 1)[1].split("\n```", 1)[0]
    return re.search(".*?".join(map(re.escape, block.split("…"))), text) is not None


def plain(rep) -> str:
    return "\n".join(d.get("text/plain", "") for d in rep.data)


@pytest.fixture(scope="module")
def k(kernel):
    r = kernel.run(SETUP)
    assert r.status == "ok", r.text() + str(r.error)
    return kernel


def test_rerun_shows_the_last_run_line_and_opens_the_diff(k):
    first = run_cell(k, "%%profile -b sampler\nwork()\n", cell_id="cell-a")
    assert first.status == "ok", first.stderr
    assert "last run" not in plain(first)
    k.run("SLOW[0] = 0.1")
    again = run_cell(k, "%%profile -b sampler\nwork()\n", cell_id="cell-a")
    assert again.status == "ok", again.stderr
    text = plain(again)
    # The second run took a third of the first's time: about −67% of wall.
    line = next(ln for ln in text.splitlines() if "against this cell's last run" in ln)
    assert line.startswith("wall −") and "(In [" in line, line
    pct = int(line.split("−")[1].split("%")[0])
    assert 50 <= pct <= 80, line
    # One click's work: the differential view of the two runs.
    labels = k.value("tuple(history.compare_last().labels)")
    assert labels[0].startswith("In [") and labels[1].startswith("In [") and labels[0] != labels[1]
    # The same source in another cell (another id) is another cell: no line.
    other = run_cell(k, "%%profile -b sampler\nwork()\n", cell_id="cell-b")
    assert "last run" not in plain(other)
    k.run("try:\n    history.compare_last('id:cell-b')\nexcept ValueError as e:\n    MSG = str(e)\n")
    assert documented("history-nothing-to-compare", k.value("MSG"))


def test_changing_the_backend_gives_the_refusal_not_a_diff(k):
    run_cell(k, "%%profile -b sampler\nwork()\n", cell_id="cell-c")
    r = run_cell(k, "%%profile -b cprofile\nwork()\n", cell_id="cell-c")
    assert r.status == "ok", r.stderr
    text = plain(r)
    assert ("Not compared with this cell's last run: its last run (In [" in text
            and "used --backend sampler and this one cprofile" in text), text
    assert "against this cell's last run" not in text
    assert documented("history-not-comparable", text)
    err = k.value("history.refusal(*history._cells['id:cell-c'][-2:])")
    assert "used --backend sampler and this one cprofile" in err


def test_without_a_cell_id_the_source_is_the_key_and_history_lists_the_runs(k):
    k.run("history.clear()")
    for _ in range(2):
        r = run_cell(k, "%%profile -b sampler -q\nwork()  # by source\n")
        assert r.status == "ok", r.stderr
    rows = k.value("history.listing()[['cell', 'backend', 'metric']].values.tolist()")
    assert rows == [["work() # by source", "sampler", "wall"]] * 2
    listed = run_cell(k, "%profile --history")
    assert listed.status == "ok", listed.stderr
    assert "work() # by source" in plain(listed) and "against this cell's last run" in plain(listed)


def test_history_stays_bounded_in_runs_cells_and_bytes(k):
    k.run("history.clear(); history.RUNS, history.CELLS, history.KEEP = 3, 2, 2")
    try:
        for i in range(5):
            r = run_cell(k, "%%profile -b sampler -q\nwork()\n", cell_id="bounded")
            assert r.status == "ok", r.stderr
        for name in ("x", "y"):
            run_cell(k, "%%profile -b sampler -q\nwork()\n", cell_id=name)
        got = k.value("{key: [r.profile is not None for r in runs] for key, runs in history._cells.items()}")
        # Two cells at most (the least recently run forgotten), 3 runs each, 2 kept profiles each.
        assert got == {"id:x": [True], "id:y": [True]}
        for i in range(4):
            run_cell(k, "%%profile -b sampler -q\nwork()\n", cell_id="x")
        got = k.value("[r.profile is not None for r in history._cells['id:x']]")
        assert got == [False, True, True]
        # A byte budget smaller than two profiles keeps only the newest one.
        one = k.value("history._cells['id:x'][-1].nbytes")
        assert one > 0
        k.run(f"history.MAX_BYTES = {int(one * 1.5)}")
        run_cell(k, "%%profile -b sampler -q\nwork()\n", cell_id="x")
        kept, total = k.value("([r.profile is not None for rs in history._cells.values() for r in rs], "
                              "history.kept_bytes())")
        assert total <= int(one * 1.5) and sum(kept) == 1
    finally:
        k.run("history.RUNS, history.CELLS, history.KEEP, history.MAX_BYTES = 10, 50, 2, 64 * 2**20")
