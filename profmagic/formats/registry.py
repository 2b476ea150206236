"""What a format is, declared once by its module: ``FORMAT = Format(NAME, __name__, ...)``.

``writer_for``, ``profmagic convert``, the report's downloads and the ``profmagic view`` page all read
these descriptors; none keeps its own table of suffixes or MIME types."""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    name: str                        # the module's NAME: what meta["format"] and Raw.format say
    module: str                      # the module that reads it (and writes it)
    suffixes: tuple[str, ...] = ()   # file names it is written under, the usual one first; () = no writer
    raw_suffix: str = ""             # a raw capture in this format is saved under this suffix
    mime: str = "application/octet-stream"
    option: str = ""                 # its name for ``convert --to`` (default: name); writers only
    label: str = ""                  # its name in a download link
    opens: str = ""                  # what opens the file, said beside its download link

    def __post_init__(self):
        if not self.raw_suffix:
            object.__setattr__(self, "raw_suffix", self.suffixes[0] if self.suffixes else "." + self.name)
        if self.suffixes and not self.option:
            object.__setattr__(self, "option", self.name)

    @property
    def reader(self):
        """``read(data, source=, **options) -> Profile``."""
        return importlib.import_module(self.module).read

    @property
    def writer(self):
        """``write(profile) -> bytes``, or None for a format profmagic does not write."""
        return importlib.import_module(self.module).write if self.suffixes else None
