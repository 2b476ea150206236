"""The ``profmagic`` command: info and convert over the same pipeline as the magic."""
from __future__ import annotations

import argparse
import re
import sys
import unicodedata

from . import load
from .errors import ProfileFormatError


_UNSAFE = {"Cc", "Cf", "Cs", "Zl", "Zp"}   # controls, format (bidi overrides...), lone surrogates, separators


def term(text) -> str:
    """``text`` safe to print on a terminal: control and format characters (ESC, NUL, right-to-left
    override...), line separators and lone surrogates are written as escapes (``\\x1b``, ``\\u202e``)."""
    return re.sub(r"[^\x20-\x7e]", _escape, str(text))


def _escape(m) -> str:
    c = m.group()
    if unicodedata.category(c) not in _UNSAFE:
        return c
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def summary(p, top: int = 10) -> str:
    """A plain-text summary: format, threads, samples, duration, top functions by self and total.
    What comes from the file (names, files, labels) is escaped for the terminal."""
    backend = p.meta.get("backend")
    out = [f"format:   {term(p.meta.get('format', '?'))}"
           + (f" (backend {term(backend)})" if backend not in (None, p.meta.get("format")) else ""),
           f"metric:   {term(p.describe())}",
           f"threads:  {len(p.threads)}",
           f"samples:  {p.sample_count:,}",
           f"total:    {p.total():,.6g} ({p.metric})"]
    d = p.duration
    out.append(f"duration: {d:.6g} s" if d is not None else "duration: unknown (no time order in this source)")
    if p.meta.get("approximate"):
        out.append(f"note:     approximate: {term(p.meta['approximate'])}")
    fn = p.functions()
    total = p.total() or 1
    for key in ("self", "total"):
        out.append(f"\ntop {top} functions by {key} ({p.metric}):")
        for _, r in fn.sort_values(key, ascending=False, kind="stable").head(top).iterrows():
            share = 100.0 * r[key] / total
            out.append(f"  {share:6.2f}%  {r[key]:>12,.6g}  {term(r['name'])}"
                       + (f"  [{term(r['file'])}]" if r["file"] else ""))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="profmagic", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("info", help="summarise a profile file")
    a.add_argument("file")
    a.add_argument("--format", default=None, help="skip sniffing")
    a.add_argument("--top", type=int, default=10)
    c = sub.add_parser("convert", help="convert between formats, chosen by OUT's extension")
    c.add_argument("input")
    c.add_argument("output", help=".speedscope.json / .json, or .folded / .txt")
    c.add_argument("--format", default=None, help="input format; sniffed when omitted")
    args = ap.parse_args(argv)
    try:
        p = load(args.file if args.cmd == "info" else args.input, format=args.format)
    except (ProfileFormatError, OSError, ValueError) as e:
        print(f"profmagic: {term(e)}", file=sys.stderr)
        return 2
    if args.cmd == "info":
        print(summary(p, args.top))
    else:
        try:
            p.save(args.output)
        except (OSError, ValueError) as e:
            print(f"profmagic: {term(e)}", file=sys.stderr)
            return 2
        print(f"wrote {args.output} ({p.sample_count:,} samples, {len(p.threads)} thread(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
