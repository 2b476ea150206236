"""No shell strings anywhere in the package: every subprocess gets an argument list (issue 8)."""
from __future__ import annotations

import os
import re

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "profmagic")
BANNED = re.compile(r"shell\s*=\s*True|\bos\.system\s*\(|\bos\.popen\s*\(|\bcommands\.getoutput|"
                    r"\bsubprocess\.getoutput\s*\(|\bsubprocess\.getstatusoutput\s*\(")


def test_package_source_has_no_shell_strings():
    hits, scanned = [], 0
    for dirpath, _, files in os.walk(PKG):
        for name in files:
            if name.endswith(".py"):
                scanned += 1
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    for n, line in enumerate(f, 1):
                        if BANNED.search(line):
                            hits.append(f"{os.path.relpath(path, PKG)}:{n}: {line.strip()}")
    assert scanned > 20
    assert hits == [], "shell strings in the package:\n" + "\n".join(hits)


def test_scanner_catches_each_form():
    for bad in ("subprocess.run(cmd, shell=True)", "os.system('ls')", "os.popen('ls')",
                "subprocess.getoutput('ls')", "Popen(x, shell = True)"):
        assert BANNED.search(bad), bad
