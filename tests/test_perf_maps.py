"""perf_maps.hide_stray_maps on perf.data files written here record by record (the real-process cases
are in test_perf_backend.py): which mappings count as stray, and files it must leave alone."""
import struct

from profmagic.backends import perf_maps

LIBC = b"/usr/lib/x86_64-linux-gnu/libc.so.6"
BASE = 0x7F0000000000


def mmap2(pid, start, length, pgoff, prot, name=LIBC):
    name = name + b"\0" * (8 - len(name) % 8)
    body = struct.pack("<IIQQQ24xII", pid, pid, start, length, pgoff, prot, 0) + name
    return struct.pack("<IHH", perf_maps.MMAP2, 2, 8 + len(body)) + body


def perf_data(records: list[bytes], header_size: int = 104) -> bytes:
    data = b"".join(records)
    head = perf_maps.MAGIC + struct.pack("<QQQQQQ", header_size, 0, 0, 0, header_size, len(data))
    return head + b"\0" * (header_size - len(head)) + data


def libc_image(pid=7):
    """libc as ld.so maps it: headers at the base, text, rodata, then RELRO and data one page off
    their file offsets (so "address minus offset" is not the base for them)."""
    return [mmap2(pid, BASE, 0x26000, 0, 1), mmap2(pid, BASE + 0x26000, 0x156000, 0x26000, 5),
            mmap2(pid, BASE + 0x17C000, 0x53000, 0x17C000, 1), mmap2(pid, BASE + 0x1D0000, 0x4000, 0x1CF000, 1),
            mmap2(pid, BASE + 0x1D4000, 0x2000, 0x1D3000, 3)]


def test_only_the_mapping_outside_the_image_is_hidden(tmp_path):
    stray = mmap2(7, BASE - 0x10000000, 0x9000, 0x1A000, 1)
    other = mmap2(8, BASE - 0x10000000, 0x9000, 0x1A000, 1)   # another process, libc not loaded: no image
    f = tmp_path / "perf.data"
    f.write_bytes(perf_data(libc_image() + [stray, other]))
    before = f.read_bytes()
    hidden = perf_maps.hide_stray_maps(str(f))
    assert hidden == [{"file": LIBC.decode(), "start": BASE - 0x10000000, "pgoff": 0x1A000, "len": 0x9000}]
    after = f.read_bytes()
    assert len(after) == len(before)
    at = before.index(stray) + perf_maps.NAME_AT
    assert after[at:at + len(LIBC)] == b"//anon" + b"\0" * (len(LIBC) - 6)
    # Everything else is byte for byte what it was.
    assert after[:at] == before[:at] and after[at + len(LIBC):] == before[at + len(LIBC):]
    assert perf_maps.hide_stray_maps(str(f)) == []   # and once done, nothing more to do


def test_files_it_leaves_alone(tmp_path):
    cases = {
        "pipe": perf_data(libc_image() + [mmap2(7, 0x1000, 0x9000, 0x1A000, 1)], header_size=16),
        "not perf": b"perf script text, not perf.data\n" * 4,
        "short": perf_maps.MAGIC + b"\0" * 10,
        "compressed": perf_data([struct.pack("<IHH", perf_maps.COMPRESSED, 0, 16), b"\0" * 8]
                                + [mmap2(7, 0x1000, 0x9000, 0x1A000, 1)]),
        "torn": perf_data(libc_image() + [mmap2(7, 0x1000, 0x9000, 0x1A000, 1)])[:-30],
    }
    for name, data in cases.items():
        f = tmp_path / name
        f.write_bytes(data)
        got = perf_maps.hide_stray_maps(str(f))
        assert f.read_bytes() == data, name
        # A torn last record is not read; the records before it hold nothing stray.
        assert got == [], name
