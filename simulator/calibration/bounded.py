"""Bounded reading of input files, for every layer (this is the bottom one).

``read_text`` reads a regular file only, at most ``limit`` bytes, as UTF-8: a FIFO, a
device, a directory or a pipe (process substitution ``<(...)`` gives one) is refused before
any byte is read, so nothing blocks and nothing grows without bound. ``yaml_load`` builds a
YAML document only after counting the nodes its aliases expand to. Both raise
``ReadRefused`` with a short reason (no path); callers wrap it in their own one-line error
naming the field and the file.
"""

from __future__ import annotations

import difflib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MAX_YAML_NODES",
    "ReadRefused",
    "UniqueKeyLoader",
    "read_lines",
    "read_text",
    "shorten",
    "show",
    "yaml_load",
]

#: Nodes a YAML document may expand to, aliases counted at each use (a billion laughs has 1e9).
MAX_YAML_NODES = 1_000_000
_KINDS = {
    stat.S_IFIFO: "a pipe or FIFO (process substitution <(...) gives one): save it to a file",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a folder",
    stat.S_IFSOCK: "a socket",
}


class InputError(ValueError):
    """Bad input of any kind (an option, a model, a topology, a calibration file, programs
    that do not fit together): one line naming the field and the value; the command line
    reports it with exit code 2. ``tpsim.InputError`` catches every such error the API
    raises (:class:`tpsim.ConfigError` and the others are its kinds)."""


class ReadRefused(InputError):
    """An input file that is not read: its reason, one short line without the path."""


def shorten(text: str, limit: int = 120) -> str:
    """``text`` on one line, control characters escaped, at most ``limit`` characters."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def squash(name: str) -> str:
    """A name without case or punctuation: ``Llama-3.1-70B`` and ``llama3.1-70b``, ``vLLM``
    and ``vllm``, ``TensorRT-LLM`` and ``tensorrt_llm`` look alike."""
    return "".join(c for c in name.lower() if c.isalnum())


def did_you_mean(word: object, choices: list[str]) -> str:
    """' (did you mean 'x'?)' for the closest choice, or ''."""
    close = difflib.get_close_matches(str(word), choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _open_regular(path: str | Path, limit: int) -> int:
    """A read-only descriptor of the regular file ``path`` of at most ``limit`` bytes (never
    blocking on a FIFO); ReadRefused, the descriptor closed, for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ReadRefused("cannot read (no such file)") from None
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            raise ReadRefused("cannot read (file name too long)") from None
        raise ReadRefused(f"cannot read ({e.strerror or e})") from None
    except (ValueError, TypeError) as e:  # a NUL byte in the name
        raise ReadRefused(f"cannot read ({e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise ReadRefused(f"cannot read (not a regular file: {kind})")
        if st.st_size > limit:
            raise ReadRefused(f"larger than {limit} bytes")
    except OSError as e:
        os.close(fd)
        raise ReadRefused(f"cannot read ({e.strerror or e})") from None
    except ReadRefused:
        os.close(fd)
        raise
    return fd


def read_text(path: str | Path, limit: int, *, bom: bool = True) -> str:
    """The UTF-8 text of the regular file ``path`` (at most ``limit`` bytes); ReadRefused if
    it is missing, not a regular file, larger, growing past the limit, or not UTF-8."""
    fd = _open_regular(path, limit)
    try:
        chunks, got = [], 0
        while got <= limit:  # a file growing while read stops at the limit too
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as e:
        raise ReadRefused(f"cannot read ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if got > limit:
        raise ReadRefused(f"larger than {limit} bytes")
    try:
        return b"".join(chunks).decode("utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError as e:
        raise ReadRefused(f"not UTF-8 text (bad byte at offset {e.start})") from None


def read_lines(path: str | Path, limit: int) -> Iterator[str]:
    """The complete lines (each ending in a newline, kept) of the regular file ``path``, one
    at a time, as UTF-8, so that a file of ``limit`` bytes is never held whole; what follows
    the last newline is not a line. ReadRefused as :func:`read_text` (no byte-order mark)."""
    fd = _open_regular(path, limit)
    with os.fdopen(fd, "rb", buffering=1 << 20) as f:
        try:
            offset = 0
            while True:
                raw = f.readline(limit + 1 - offset)  # a file growing while read stops too
                if not raw:
                    return
                if offset + len(raw) > limit:
                    raise ReadRefused(f"larger than {limit} bytes")
                if not raw.endswith(b"\n"):
                    return
                try:
                    yield raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    where = offset + e.start
                    raise ReadRefused(f"not UTF-8 text (bad byte at offset {where})") from None
                offset += len(raw)
        except OSError as e:
            raise ReadRefused(f"cannot read ({e.strerror or e})") from None


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """Nodes of ``root`` with every alias expanded, counted without expanding (memoised on
    the shared node objects an alias refers to); stops early past ``limit``."""
    sizes: dict[int, int] = {}
    # iterative post-order walk: a 5000-deep document must not exhaust the Python stack
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        if done:
            total = 1 + sum(sizes[id(c)] for c in children)
            sizes[id(node)] = min(total, limit + 1)
            continue
        stack.append((node, True))
        stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def _depth(root: yaml.Node, limit: int) -> int:
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    deepest = 0
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((c, d + 1) for c in node.value)
        elif isinstance(node, yaml.MappingNode):
            stack.extend((c, d + 1) for pair in node.value for c in pair)
    return deepest


class UniqueKeyLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a key given twice in one mapping (ReadRefused naming it and
    its line): a typo or a pasted block is an error, never a silent last-one-wins."""


def _unique_mapping(loader: UniqueKeyLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # <<: *base, as topology files accept
            continue
        key = loader.construct_object(key_node)
        try:
            hash(key)
        except TypeError:  # a list or mapping as a key: no setting is named so
            raise ReadRefused(
                f"a {type(key).__name__} as a key (line {key_node.start_mark.line + 1})"
            ) from None
        if key in seen:
            raise ReadRefused(f"key {shorten(repr(key), 60)} appears twice (line "
                              f"{key_node.start_mark.line + 1})")  # fmt: skip
        seen.add(key)
    return loader.construct_mapping(node)


UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def yaml_load(
    text: str,
    loader: type[yaml.SafeLoader] = yaml.SafeLoader,
    *,
    max_nodes: int = MAX_YAML_NODES,
    max_depth: int = 50,
) -> Any:
    """One YAML document built by ``loader``, after checking that its aliases expand to at
    most ``max_nodes`` nodes and that it nests at most ``max_depth`` deep (ReadRefused);
    syntax errors propagate as yaml.YAMLError."""
    ld = loader(text)
    try:
        try:
            root = ld.get_single_node()
        except RecursionError:
            raise ReadRefused(f"nested deeper than {max_depth} levels") from None
        if root is None:
            return None
        if _depth(root, max_depth) > max_depth:
            raise ReadRefused(f"nested deeper than {max_depth} levels")
        if _expanded_size(root, max_nodes) > max_nodes:
            raise ReadRefused(
                f"its aliases expand to more than {max_nodes:,} values (a billion laughs?)"
            )
        return ld.construct_document(root)
    finally:
        ld.dispose()


def show(value: object, limit: int = 60) -> str:
    """repr of ``value`` for a one-line message: short, control characters escaped, and
    safe for integers past Python's digit limit and for deeply nested lists."""
    try:
        text = repr(value)
    except (ValueError, RecursionError):  # a 5000-digit int, a 5000-deep list
        size = f" of {value.bit_length()} bits" if isinstance(value, int) else ""
        text = f"<{type(value).__name__}{size}, too large to show>"
    return shorten(text, limit)
