"""The checked programs of a plan's groups, kept in the disk cache.

A plan loaded from the disk cache still parsed and checked the TC text of every group
to make its ``Kernel`` (the signature binds the sizes, the output shapes follow): 23
programs, a third of ResNet-18's 0.19 s load.  The plan's programs are stored together,
pickled, under a key of their canonical texts and polytc's own source (``cache_key``),
and the next load unpickles them (3 ms) instead.  Nothing is kept without the disk cache
(``POLYTC_NO_DISK_CACHE``); an entry that does not unpickle, or holds other texts, is
ignored and the texts are parsed.
"""
from __future__ import annotations

import os
import pickle

from .. import config
from ..cache import DiskCache, cache_key
from ..diagnostics import Source
from ..lang.inline import inline_temporaries
from ..lang.parser import parse
from ..lang.sema import check

FILE = "programs.pickle"


def checked(name: str, text: str):
    """A group's checked program, its temporaries inlined."""
    return inline_temporaries(check(parse(text, f"<{name}>")[0], Source(text, f"<{name}>")))


class Programs:
    """The programs of the canonical ``texts`` of one plan: from the disk cache where
    they are there, else parsed (``get``) and stored by ``save``."""

    def __init__(self, texts: list):
        self.texts = list(texts)
        self.found: dict = {}
        self.made: dict = {}
        self.key = cache_key(kind="group-programs", texts=self.texts) \
            if config.disk_cache_enabled() and self.texts else None
        if self.key is None:
            return
        entry = DiskCache().get(self.key)
        if entry is None:
            return
        try:
            with open(os.path.join(entry["dir"], FILE), "rb") as f:
                found = pickle.load(f)
        except Exception:  # noqa: BLE001 - an unreadable entry: the texts are parsed
            return
        if isinstance(found, dict) and set(found) == set(self.texts):
            self.found = found

    def get(self, name: str, text: str):
        """The checked program of ``text`` (``name``: its group's, for messages)."""
        program = self.found.get(text)
        if program is None:
            program = self.made[text] = checked(name, text)
        return program

    def save(self) -> None:
        """Store the programs, once every text has one (a group that failed to compile
        has none: nothing is stored)."""
        if self.key is None or self.found or set(self.made) != set(self.texts):
            return
        blob = pickle.dumps(self.made, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            DiskCache().put(self.key, {FILE: blob}, {"kind": "group-programs"})
        except OSError as e:  # a full disk: the next load parses them again
            config.log(1, f"could not store the groups' programs ({e})")
