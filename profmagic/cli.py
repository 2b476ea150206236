"""The ``profmagic`` command: info and convert over the same pipeline as the magic."""
from __future__ import annotations

import argparse
import sys

from . import load
from .errors import ProfileFormatError


def summary(p, top: int = 10) -> str:
    """A plain-text summary: format, threads, samples, duration, top functions by self and total."""
    out = [f"format:   {p.meta.get('format', '?')}" + (f" (backend {p.meta['backend']})"
                                                       if p.meta.get("backend") not in (None, p.meta.get("format")) else ""),
           f"metric:   {p.describe()}",
           f"threads:  {len(p.threads)}",
           f"samples:  {p.sample_count:,}",
           f"total:    {p.total():,.6g} ({p.metric})"]
    d = p.duration
    out.append(f"duration: {d:.6g} s" if d is not None else "duration: unknown (no time order in this source)")
    if p.meta.get("approximate"):
        out.append(f"note:     approximate: {p.meta['approximate']}")
    fn = p.functions()
    total = p.total() or 1
    for key in ("self", "total"):
        out.append(f"\ntop {top} functions by {key} ({p.metric}):")
        for _, r in fn.sort_values(key, ascending=False, kind="stable").head(top).iterrows():
            share = 100.0 * r[key] / total
            out.append(f"  {share:6.2f}%  {r[key]:>12,.6g}  {r['name']}" + (f"  [{r['file']}]" if r["file"] else ""))
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
        print(f"profmagic: {e}", file=sys.stderr)
        return 2
    if args.cmd == "info":
        print(summary(p, args.top))
    else:
        try:
            p.save(args.output)
        except (OSError, ValueError) as e:
            print(f"profmagic: {e}", file=sys.stderr)
            return 2
        print(f"wrote {args.output} ({p.sample_count:,} samples, {len(p.threads)} thread(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
