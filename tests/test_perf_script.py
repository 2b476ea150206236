"""perf script reader: FlameGraph's own expected outputs, our documented choices, a real perf run."""
import profmagic
import glob
import os
import re
import subprocess

import pytest

from profmagic.errors import ProfileFormatError
from profmagic import formats
from profmagic.formats import perf_script, folded

pytestmark = pytest.mark.timeout(120)

OPTS = ("pid", "tid", "kernel", "jit", "all", "addrs")
# Expected files recorded before FlameGraph e54f142 (Java tidy for "java-PID" roots): MANIFEST.md.
STALE = {(s, o) for s in ("perf-java-faults-01", "perf-java-stacks-01", "perf-java-stacks-02",
                          "perf-vertx-stacks-01") for o in ("pid", "tid")}


def _dir(corpus):
    return os.path.join(corpus, "flamegraph", "test")


def _stems(corpus):
    return sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(_dir(corpus), "*.txt")))


def _input(corpus, stem):
    with open(os.path.join(_dir(corpus), stem + ".txt"), "rb") as f:
        return f.read()


def _expected(corpus, stem, opt):
    with open(os.path.join(_dir(corpus), "results", f"{stem}-collapsed-{opt}.txt"), encoding="utf-8") as f:
        return f.read()


def _fg(p):
    """The metric that holds FlameGraph's count: the period sum ('period' for clock events)."""
    return "period" if "period" in p.stacks else "samples"


def _compat(data, **opts):
    """FlameGraph's folded text: drop an unterminated last record, write the period sums."""
    p = perf_script.read(data, keep_unterminated=False, **opts)
    return profmagic.to_folded(p, metric=_fg(p))


def _refold(text, frame_fn):
    """Apply frame_fn to every frame of a folded text, merge equal stacks, sort by bytes as Perl does."""
    agg = {}
    for line in text.splitlines():
        stack, count = line.rsplit(" ", 1)
        key = ";".join(frame_fn(f) for f in stack.split(";"))
        agg[key] = agg.get(key, 0) + int(count)
    return "".join(f"{k} {agg[k]}\n" for k in sorted(agg, key=lambda k: k.encode()))


def test_corpus_has_13_inputs(corpus):
    assert len(_stems(corpus)) == 13


@pytest.mark.parametrize("opt", OPTS)
def test_matches_flamegraph_expected_files(corpus, opt):
    checked = 0
    for stem in _stems(corpus):
        if (stem, opt) in STALE:
            continue
        assert _compat(_input(corpus, stem), **{opt: True}) == _expected(corpus, stem, opt), (stem, opt)
        checked += 1
    assert checked == (13 if opt not in ("pid", "tid") else 9)


@pytest.mark.parametrize("stem,opt", sorted(STALE))
def test_stale_java_files_differ_only_by_java_tidy(corpus, stem, opt):
    # We follow FlameGraph HEAD (pname =~ /^java/): "java-PID" roots get the Java tidy too, which
    # drops the leading L of frames that contain '/'. The stale files were made without it.
    stale = _expected(corpus, stem, opt)
    ours = _compat(_input(corpus, stem), **{opt: True})
    assert ours != stale
    java_tidy = lambda f: f[1:] if f.startswith("L") and "/" in f else f
    assert ours == _refold(stale, java_tidy)
    assert "Ljava/" in stale and "Ljava/" not in ours


def test_default_is_kernel_file_without_annotations(corpus):
    # --kernel only appends "_[k]" to kernel frames, so the default output is that file with the
    # annotation removed (stacks merged and re-sorted, as stackcollapse would).
    for stem in _stems(corpus):
        want = _refold(_expected(corpus, stem, "kernel"), lambda f: f[:-4] if f.endswith("_[k]") else f)
        assert _compat(_input(corpus, stem)) == want, stem


def test_totals_match_manifest(corpus):
    # Total weights listed in MANIFEST.md (sum of periods; unterminated records dropped).
    totals = {"perf-dd-stacks-01": 101010100, "perf-java-faults-01": 200, "perf-rust-Yamakaky-dcpu": 6850637,
              "perf-cycles-instructions-01": 333, "perf-vertx-stacks-01": 285}
    for stem, total in totals.items():
        p = perf_script.read(_input(corpus, stem), keep_unterminated=False)
        assert p.total(_fg(p)) == total, stem


def test_unterminated_last_record_is_kept_by_default(corpus):
    # dd-stacks does not end with a blank line: FlameGraph drops its last record, we keep it.
    data = _input(corpus, "perf-dd-stacks-01")
    assert not data.endswith(b"\n\n")
    kept = perf_script.read(data)
    dropped = perf_script.read(data, keep_unterminated=False)
    assert kept.meta["unterminated_record"] == "kept"
    assert dropped.meta["unterminated_record"] == "dropped"
    assert kept.meta["records"] == dropped.meta["records"] + 1 == 11
    assert kept.total("period") - dropped.total("period") == 10101010
    assert kept.total("samples") - dropped.total("samples") == 1
    # Keeping it is the same as FlameGraph reading the file closed by a blank line.
    assert profmagic.to_folded(kept, metric="period") == _compat(data + b"\n")
    # A file that ends with a blank line is read the same either way.
    closed = _input(corpus, "perf-funcab-cmd-01")
    assert profmagic.to_folded(perf_script.read(closed)) == _compat(closed)


def test_samples_keep_time_pid_tid_comm_and_period(corpus):
    p = perf_script.read(_input(corpus, "perf-iperf-stacks-pidtid-01"), keep_unterminated=False)
    s = p.samples
    assert len(s) == p.meta["records"] == 200
    assert s["time"].is_monotonic_increasing and s["time"].notna().all()
    assert {"time", "stack", "thread", "comm", "pid", "tid", "period"} <= set(s.columns)
    # The split by each sample's comm, pid and tid agrees with FlameGraph's --tid roots.
    tid_roots = {}
    for line in _expected(corpus, "perf-iperf-stacks-pidtid-01", "tid").splitlines():
        stack, n = line.rsplit(" ", 1)
        root = stack.split(";")[0]
        tid_roots[root] = tid_roots.get(root, 0) + int(n)
    ours = s.groupby(["comm", "pid", "tid"])["period"].sum()
    assert {f"{c}-{pid}/{tid}".replace(" ", "_"): int(n) for (c, pid, tid), n in ours.items()} == tid_roots
    # A thread is one row, named by its last comm: 28797 ran "run", then exec'd multilog.
    assert set(p.stacks["thread"]) == {f"{c}-{pid}/{tid}" for (c, pid, tid) in ours.index} - {"run-28797/28797"}
    assert list(s.loc[s["tid"] == 28797, "comm"]) == ["run", "multilog"]
    row = s.iloc[0]
    assert row["thread"] == f"{row['comm']}-{row['pid']}/{row['tid']}"
    assert p.duration > 0


def test_single_number_header_is_tid_with_unknown_pid(corpus):
    p = perf_script.read(_input(corpus, "perf-funcab-cmd-01"))
    assert p.samples["pid"].isna().all()
    assert set(p.stacks["thread"]) == {f"func_ab-?/{t}" for t in p.samples["tid"].unique()}


def test_no_timestamps_means_no_time_order(corpus):
    p = perf_script.read(_input(corpus, "perf-funcab-pid-01"))
    assert p.samples is None
    assert p.total("samples") == 228


def test_cpu_clock_with_periods_gives_cpu_seconds(corpus):
    p = perf_script.read(_input(corpus, "perf-dd-stacks-01"), keep_unterminated=False)
    assert p.meta["event"] == "cpu-clock" and p.metric == "cpu"
    assert p.total("cpu") == pytest.approx(101010100 * 1e-9)
    assert p.samples["cpu"].sum() == pytest.approx(p.total("cpu"))
    # Without periods (funcab: "func_ab 15294 cpu-clock:") the CPU time is unknown.
    q = perf_script.read(_input(corpus, "perf-funcab-pid-01"))
    assert q.metric == "samples" and "cpu" not in q.metrics


def test_event_filter(corpus):
    data = _input(corpus, "perf-cycles-instructions-01")
    first = perf_script.read(data)
    assert first.meta["event"] == "instructions" and first.meta["events_seen"] == {"cycles": 111, "instructions": 333}
    cycles = perf_script.read(data, event_filter="cycles")
    assert cycles.meta["records"] == 111 and cycles.total("samples") == 111


def test_frame_kinds(corpus):
    p = perf_script.read(_input(corpus, "perf-iperf-stacks-pidtid-01"))
    f = p.frames
    assert (f[f["file"] == "[kernel.kallsyms]"]["kind"] == "kernel").all()
    assert (f["kind"] == "kernel").sum() > 10
    assert "tcp_sendmsg" in set(f[f["kind"] == "kernel"]["name"])
    # The vDSO runs in user mode: native, though FlameGraph's --kernel names it _[k] as every [module].
    vdso = f[f["file"] == "[vdso]"]
    assert list(vdso["name"]) == ["__vdso_gettimeofday"] and (vdso["kind"] == "native").all()
    assert "__vdso_gettimeofday_[k]" in profmagic.to_folded(
        perf_script.read(_input(corpus, "perf-iperf-stacks-pidtid-01"), kernel=True))
    js = perf_script.read(_input(corpus, "perf-js-stacks-01")).frames
    jit = js[js["file"].str.match(r"/tmp/perf-\d+\.map")]
    assert len(jit) and (jit["kind"] == "other").all()
    assert (js[js["file"].str.contains("node")]["kind"] == "native").all()
    # Roots are FlameGraph's comm frames; to_folded adds no thread names of its own.
    assert p.meta["folded_thread_roots"] is False


PY_TEXT = (b"python3.12 4242/4243 [001] 100.000001:    1001001 cpu-clock: \n"
           b"\t    7f6a1810d0a0 py::busy:/home/u/work.py (/tmp/perf-4242.map)\n"
           b"\t    7f6a1810d000 py::<module>:/home/u/work.py (/tmp/perf-4242.map)\n"
           b"\t          1f1d25 _PyEval_EvalFrameDefault+0x485 (/usr/lib/libpython3.12.so.1.0)\n\n")


def test_python_trampoline_frames():
    # Names as Python 3.12's perf trampoline writes them to /tmp/perf-PID.map.
    p = perf_script.read(PY_TEXT)
    py = p.frames[p.frames["kind"] == "python"]
    assert set(py["name"]) == {"<module>", "busy"}
    assert set(py["file"]) == {"/home/u/work.py"}
    assert profmagic.to_folded(p, metric="period") == "python3.12;_PyEval_EvalFrameDefault;<module>;busy 1001001\n"
    assert profmagic.to_folded(p, metric="samples") == "python3.12;_PyEval_EvalFrameDefault;<module>;busy 1\n"
    raw = perf_script.read(PY_TEXT, python_names=False)
    assert "py::busy:/home/u/work.py" in profmagic.to_folded(raw, metric="samples")


def test_stackcollapse_tidy_rules():
    text = (b"my prog 7/8 1.5: 3 ev:\n"
            b"  1 a->b->c (/lib/x.so)\n"
            b"  2 ns::f(int) const+0x1f (/lib/x.so)\n"
            b"  3 (anonymous namespace)::g(int) (/lib/x.so)\n"
            b"  3 x::(anonymous namespace)::g(int) (/lib/x.so)\n"
            b"  4 net/http.(*Client).Do (/bin/go)\n"
            b"  5 [unknown] (/usr/lib/libz.so.1)\n"
            b"  6 (skipped) (/bin/x)\n"
            b"  7 semi;colon\"q' ([kernel.kallsyms])\n\n")
    p = perf_script.read(text, tid=True, kernel=True)
    # Expected strings checked against perl stackcollapse-perf.pl (HEAD) on this input.
    assert profmagic.to_folded(p, metric="samples") == (
        "my_prog-7/8;semi:colonq_[k];[libz.so.1];net/http.(*Client).Do;x::(anonymous namespace)::g;"
        "ns::f;a;b_[i];c_[i] 3\n")
    assert profmagic.to_folded(perf_script.read(text, addrs=True)).startswith("my_prog;semi:colonq;[libz.so.1 <5>];")


def test_record_without_frames_and_zero_period():
    p = perf_script.read(b"ab 12 1.0: 0 ev:\n\n")
    assert profmagic.to_folded(p) == "ab 1\n"


def test_lenient_skips_odd_lines_but_counts_them():
    text = PY_TEXT.replace(b"\n\n", b"\nthis is not perf output\n\n")
    p = perf_script.read(text)
    assert p.meta["skipped_lines"] == 1 and "line 5" in p.meta["warnings"][0]
    with pytest.raises(ProfileFormatError, match=r"line 5: expected an event header"):
        perf_script.read(text, strict=True)


def test_frame_before_header_is_reported():
    text = b"\t  400570 func_b (/root/func_ab)\n\n" + PY_TEXT
    with pytest.raises(ProfileFormatError, match=r"line 1: expected an event header before this frame line"):
        perf_script.read(text, strict=True, source="x.txt")
    assert perf_script.read(text).meta["orphan_frame_lines"] == 1


@pytest.mark.parametrize("text", [b"", b"# only a comment\n", b"garbage\nmore garbage\n",
                                  b"\t  400570 func_b (/root/func_ab)\n"])
def test_no_samples_is_an_error(text):
    with pytest.raises(ProfileFormatError, match="no perf script samples"):
        perf_script.read(text, source="empty.txt")


def test_unterminated_only_record_dropped_is_an_error():
    with pytest.raises(ProfileFormatError, match="no complete perf script sample.*line 1"):
        perf_script.read(PY_TEXT.rstrip(b"\n"), keep_unterminated=False)


def test_no_exponential_backtracking():
    # Perl's nested (\d+)* would make Python's re take exponential time on long digit runs.
    evil = b"ab " + b"1" * 3000 + b"x\n" + b"ab 12 " + b"3" * 3000 + b"y:\n"
    p = perf_script.read(evil + PY_TEXT)
    assert p.meta["skipped_lines"] >= 1 and p.meta["records"] == 1


def test_sniff(corpus):
    for stem in _stems(corpus):
        assert perf_script.sniff(_input(corpus, stem)[:65536]), stem
        assert formats.sniff(_input(corpus, stem)[:65536]) == "perf_script", stem  # the registry's order
    assert perf_script.sniff(PY_TEXT)
    assert not perf_script.sniff(b"main;busy_loop 12\nmain;idle 3\n")
    assert not perf_script.sniff(b"PID 123 - python3\nTID 123:\n#0  0x00007f3c0a1b2c3d __nanosleep\n"
                                 b"#1  0x000055d1e2f3a4b5 main\n")
    stap = os.path.join(corpus, "flamegraph", "extra", "stap-header-example.input.txt")
    with open(stap, "rb") as f:
        assert not perf_script.sniff(f.read())
    assert folded.sniff(b"main;busy_loop 12\n")


BUSY_C = r"""
#include <time.h>
volatile unsigned long sink;
void busy_loop(void) { for (unsigned long i = 0; i < 300000000UL; i++) sink += i; }
int main(void) { busy_loop(); struct timespec ts = {0, 100000000}; nanosleep(&ts, 0); return 0; }
"""


@pytest.mark.requires("perf", "gcc")
def test_real_perf_script(tmp_path):
    src = tmp_path / "busy.c"
    src.write_text(BUSY_C)
    exe = tmp_path / "busy"
    subprocess.run(["gcc", "-O0", "-fno-omit-frame-pointer", "-o", str(exe), str(src)], check=True)
    data_file = tmp_path / "perf.data"
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-o", str(data_file),
                    "--", str(exe)], check=True, capture_output=True, timeout=60)
    out = subprocess.run(["perf", "script", "-i", str(data_file)], check=True, capture_output=True,
                         timeout=60).stdout
    assert perf_script.sniff(out[:65536])
    p = perf_script.read(out, source="perf script")
    assert p.meta["event"] == "cpu-clock" and p.metric == "cpu"
    fn = p.functions("samples").set_index("name")
    total = p.total("samples")
    assert fn.loc["busy_loop", "total"] / total > 0.8
    assert fn.loc["main", "total"] / total > 0.8
    # Off-CPU sleep is not sampled by cpu-clock: at most the few ticks spent entering it.
    sleeping = fn[fn.index.str.contains("nanosleep")]["total"].max()
    assert not sleeping > 0.05 * total
    assert (p.samples["comm"] == "busy").mean() > 0.8
    assert p.samples["time"].is_monotonic_increasing
    # cpu seconds = period (ns) * 1e-9; the busy loop runs for a noticeable time
    assert p.total("cpu") == pytest.approx(p.total("period") * 1e-9)
    assert p.total("cpu") > 0.1
    frames = p.frames.set_index("name")
    assert frames.loc["busy_loop", "kind"] == "native" and frames.loc["busy_loop", "file"] == str(exe)
    # FlameGraph's folded form: root comm frame, then main ... busy_loop.
    assert re.search(r"^busy;.*main;busy_loop \d+$", profmagic.to_folded(p, metric="samples"), re.M)


@pytest.mark.parametrize("text,line", [
    (b"ab 1 1.0: 1 ev:\n  1 f (m)\n\nab 1 2.0: 1 ev:\nGARBAGE\n", 5),
    (b"ab 1 1.0: 1 ev:\n  1 f (m)\n\n\n\nab 1 2.0: 1 ev:\nGARBAGE", 7),
    (b"ab 1 1.0: 1 ev:\n  1 f (m)\n\n\n\nab 1 2.0: 1 ev:\nGARBAGE\n\nab 1 2.0: 1 ev:\n", 7),
])
def test_error_line_numbers_count_blank_lines(text, line):
    with pytest.raises(ProfileFormatError, match=rf"^f\.txt: line {line}: expected an event header"):
        perf_script.read(text, strict=True, source="f.txt")


# perf script with scheduler records, written by hand in perf's layout (perf 6.1), with times chosen
# so every second is known: thread 11 runs 10.0-10.3 (one cpu-clock sample at 10.2, another at 10.29),
# sleeps in nanosleep 10.3-10.8 (woken by thread 12), runs 10.8-11.0; thread 12 sleeps 10.0-10.5 (its
# first event is a switch-in: asleep since before the recording), runs 10.5-11.0; thread 13 has no event.
SCHED_TEXT = b"""\
# profmagic perf-sched start=10.000000 end=11.000000 pid=11 threads=11:app,12:waker,13:idle%20one
app 11/11 10.200000:   10000000 cpu-clock: 
\t    1111 busy (/app)
\t    1000 main (/app)

app 11/11 10.290000:   10000000 cpu-clock: 
\t    1111 busy (/app)
\t    1000 main (/app)

app 11/11 10.300000:          1 sched:sched_switch: prev_comm=app prev_pid=11 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
\tffffffff82265908 __schedule ([kernel.kallsyms])
\t    2222 nanosleep (/libc)
\t    1000 main (/app)

app 11/11 10.300000: PERF_RECORD_SWITCH OUT
waker 11/12 10.500000: PERF_RECORD_SWITCH IN
waker 11/12 10.700000:          1 sched:sched_wakeup: comm=app pid=11 prio=120 target_cpu=000
\tffffffff81111111 try_to_wake_up ([kernel.kallsyms])
\tffffffff81222222 futex_wake ([kernel.kallsyms])

app 11/11 10.800000: PERF_RECORD_SWITCH IN
"""


def _by_stack(p):
    """(thread, frame names) -> (wall, cpu), summed over the rows of each reason (perf_sched's reason column)."""
    out = {}
    for t, st, w, c in zip(p.stacks["thread"], p.stacks["stack"], p.stacks["wall"], p.stacks["cpu"]):
        k = (t, tuple(p.frames.at[f, "name"] for f in st))
        w0, c0 = out.get(k, (0.0, 0.0))
        out[k] = (w0 + w, c0 + c)
    return {k: (round(w, 6), round(c, 6)) for k, (w, c) in out.items()}


def test_sched_records_give_wall_and_cpu_per_thread():
    from profmagic.formats import perf_sched
    p = perf_script.read(SCHED_TEXT, source="sched.txt")
    assert p.metric == "wall" and p.meta["window"] == [10.0, 11.0]
    got = _by_stack(p)
    # Thread 11: CPU 10.0-10.2 and 10.2-10.29 to its two samples; 10.29-10.3 and 10.8-11.0 are on-CPU
    # after its last sample: to that sample. Off-CPU 10.3-10.8 to the nanosleep stack.
    assert got[("app-11/11", ("app", "main", "busy"))] == (0.5, 0.5)
    assert got[("app-11/11", ("app", "main", "nanosleep", "__schedule"))] == (0.5, 0.0)
    assert got[("waker-11/12", (perf_sched.OFF_BEFORE,))] == (0.5, 0.0)
    assert got[("waker-11/12", (perf_sched.ON_UNSAMPLED,))] == (0.5, 0.5)
    assert got[("idle one-11/13", (perf_sched.NOT_SEEN,))] == (1.0, 0.0)
    # wall = CPU + off-CPU, and every thread's wall is the recording's second.
    for t in p.threads:
        assert p.stacks.loc[p.stacks["thread"] == t, "wall"].sum() == pytest.approx(1.0)
    s = p.samples.set_index("time")
    assert s.at[10.3, "state"] == "S" and s.at[10.3, "woken_by"] == "waker-11/12"
    assert p.meta["uncovered"][perf_sched.NOT_SEEN] == {"idle one-11/13": 1.0}


def test_sched_records_lost_switch_in_is_labelled():
    from profmagic.formats import perf_sched
    text = SCHED_TEXT.replace(b"app 11/11 10.800000: PERF_RECORD_SWITCH IN\n", b"")
    text += b"\napp 11/11 10.900000:   10000000 cpu-clock: \n\t    1111 busy (/app)\n\t    1000 main (/app)\n\n"
    p = perf_script.read(text)
    got = _by_stack(p)
    # Running at 10.9 without a switch-in since 10.3: the stretch from the switch-out is unknown.
    assert got[("app-11/11", (perf_sched.LOST,))] == (0.6, 0.0) and p.meta["inconsistent_switches"] == 1
    assert p.stacks.loc[p.stacks["thread"] == "app-11/11", "wall"].sum() == pytest.approx(1.0)


def test_sched_records_without_times_are_an_error():
    text = b"app 11/11: PERF_RECORD_SWITCH OUT\napp 11 1: sched:sched_switch: prev_state=S\n\n"
    with pytest.raises(ProfileFormatError, match="sched.txt: byte offset 0: perf script with switch records but no timestamps"):
        perf_script.read(text, source="sched.txt")


# What profmagic's recorder writes: the header also gives the CPU the kernel charged each thread.
# Thread 11 runs 10.0-10.2, is back at 10.6, where a sample fires as it gets its core back (leaf
# finish_task_switch), and runs to the end: 0.6 s on a core, of which the kernel charged 0.54 s (a
# VM's host stole the rest).
CHARGED_TEXT = b"""\
# profmagic perf-sched start=10.000000 end=11.000000 pid=11 threads=11:app,13:idle cpu=11:540000000,13:0
app 11/11 10.100000:   10000000 cpu-clock: 
\t    1111 busy (/app)
\t    1000 main (/app)

app 11/11 10.200000:          1 sched:sched_switch: prev_comm=app prev_pid=11 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
\tffffffff82265908 __schedule ([kernel.kallsyms])
\t    2222 nanosleep (/libc)
\t    1000 main (/app)

app 11/11 10.200000: PERF_RECORD_SWITCH OUT
app 11/11 10.600000: PERF_RECORD_SWITCH IN
app 11/11 10.600010:   10000000 cpu-clock: 
\tffffffff813ae453 finish_task_switch.isra.0 ([kernel.kallsyms])
\tffffffff82266273 schedule ([kernel.kallsyms])
\t    2222 nanosleep (/libc)
\t    1000 main (/app)

app 11/11 10.900000:   10000000 cpu-clock: 
\t    1111 busy (/app)
\t    1000 main (/app)

"""


def test_sched_cpu_is_what_the_kernel_charged():
    from profmagic.formats import perf_sched
    p = perf_script.read(CHARGED_TEXT, source="sched.txt")
    # On a core 10.0-10.2 and 10.6-11.0; CPU 0.9 of it, as charged. The sample at the switch-in is no
    # sample: its time goes to the next one. Off-CPU 10.2-10.6 to the nanosleep stack.
    assert _by_stack(p) == {("app-11/11", ("app", "main", "busy")): (0.6, 0.54),
                            ("app-11/11", ("app", "main", "nanosleep", "__schedule")): (0.4, 0.0),
                            ("idle-11/13", (perf_sched.NOT_SEEN,)): (1.0, 0.0)}
    assert p.meta["carried_samples"] == 1
    assert list(p.samples["wall"].round(6)) == [1.0, 0.1, 0.4, 0.5]  # idle; busy, nanosleep, busy
    assert list(p.samples["cpu"].round(6)) == [0.0, 0.09, 0.0, 0.45]
    # A thread seen in no sample still has its ids (so the cell's filter can tell whose it is).
    assert p.thread_table.set_index("label").loc["idle-11/13", ["pid", "tid", "name"]].tolist() == [11, 13, "idle"]
    # Charged more than it held a core (the reads are a moment outside the window): CPU = wall.
    more = perf_script.read(CHARGED_TEXT.replace(b"cpu=11:540000000", b"cpu=11:700000000"))
    assert _by_stack(more)[("app-11/11", ("app", "main", "busy"))] == (0.6, 0.6)
