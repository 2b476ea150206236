"""Cells with top-level await (issue 14): the time a coroutine spends awaiting is attributed to the
awaiting coroutine chain. The built-in sampler reads the chain at each sample; other backends get
the event loop's idle time split over the recorded waits by their measured durations."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.timed

SETUP = '''
%load_ext profmagic
import asyncio, time
async def co_a(): await asyncio.sleep(0.1)
async def co_b(): await asyncio.sleep(0.2)
async def co_c(): await asyncio.sleep(0.3)
async def gathered():
    return await asyncio.gather(co_a(), co_b(), co_c())
def shares(names):
    f = _profile.functions('wall').set_index('name')
    cell = _profile.stacks['thread'] == _profile.meta['cell_thread']
    whole = float(_profile.stacks.loc[cell, 'wall'].sum())
    return {n: float(f.at[n, 'total']) / whole if n in f.index else 0.0 for n in names}
'''


@pytest.fixture(scope="module")
def k(kernel):
    r = kernel.run(SETUP)
    assert r.status == "ok", r.text()
    return kernel


@pytest.mark.parametrize("backend", ["sampler", pytest.param("py-spy", marks=pytest.mark.requires("py-spy", "ptrace"))])
def test_await_sleep_is_under_the_cells_code(k, backend):
    r = k.run(f"%%profile -b {backend} -q\nawait asyncio.sleep(0.5)\n")
    assert r.status == "ok" and "no samples" not in r.stderr, r.text()
    s = k.value("dict(cell=shares(['<module>'])['<module>'], awaitf=shares(['[await]'])['[await]'], "
                "wall=_profile.meta['cell_wall'])")
    assert s["cell"] >= 0.9, s
    assert s["awaitf"] >= 0.85, s


@pytest.mark.parametrize("backend", ["sampler", pytest.param("py-spy", marks=pytest.mark.requires("py-spy", "ptrace"))])
def test_three_coroutines_one_after_the_other(k, backend):
    r = k.run(f"%%profile -b {backend} -q\nawait co_a()\nawait co_b()\nawait co_c()\n")
    assert r.status == "ok", r.text()
    s = k.value("shares(['co_a', 'co_b', 'co_c'])")
    for name, want in (("co_a", 1 / 6), ("co_b", 2 / 6), ("co_c", 3 / 6)):
        assert s[name] == pytest.approx(want, abs=0.05), s


def test_gather_is_attributed_to_the_awaiting_line(k):
    """asyncio.gather runs its coroutines as tasks of their own: while the cell awaits the gather,
    the cell's chain ends in gathered() awaiting it, so the wall time (0.3 s, the longest) goes to
    gathered(); the tasks' own frames appear only when they run (here: almost never, they sleep)."""
    r = k.run("%%profile -b sampler -q\nawait gathered()\n")
    assert r.status == "ok", r.text()
    s = k.value("dict(shares(['gathered', 'co_a', 'co_c']), wall=_profile.meta['cell_wall'])")
    assert s["gathered"] >= 0.9, s
    assert s["co_c"] < 0.1 and s["co_a"] < 0.1, s
    assert s["wall"] == pytest.approx(0.3, abs=0.1)
