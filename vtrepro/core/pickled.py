"""Plain data out of a pickle, without unpickling it: the teacher scores as sentence-transformers publishes them
(``cross-encoder-ms-marco-MiniLM-L-6-v2-scores.pkl.gz``: a gzip'd pickle of ``{qid: {pid: score}}``).

Python's unpickler runs whatever a pickle names: ``GLOBAL``/``STACK_GLOBAL`` resolve any importable callable and
``REDUCE``, ``BUILD``, ``INST``, ``OBJ`` and ``NEWOBJ`` call it. This reader never uses the unpickler. It walks
the opcode stream with :func:`pickletools.genops` (which decodes each opcode's argument and runs nothing) and
interprets only the opcodes that build plain data (None, booleans, numbers, strings, bytes, lists, tuples,
dicts, the memo); any other opcode, so every way to name or call code, is refused where it stands, before any
object it would build exists. The stream is read as it is decompressed, with every cost bounded first: bytes
in (:data:`MAX_PICKLE_FILE_BYTES`) and out (:data:`MAX_PICKLE_BYTES`), the length of one string or number,
container nesting (:data:`MAX_PICKLE_DEPTH`) and items (:data:`MAX_PICKLE_ITEMS`). ``keep`` drops the entries of
the outermost dict that are not wanted as they are set, so memory holds what is kept plus one batch.
"""
from __future__ import annotations

import gzip
import pickletools
from pathlib import Path
from typing import IO, Any, Callable, cast

from vtrepro.core.errors import VtreproError
from vtrepro.core.io import check_regular_file

MAX_PICKLE_FILE_BYTES = 8 * 2**30
"""Largest pickle file read (compressed size): the published teacher scores are well under it."""
MAX_PICKLE_BYTES = 32 * 2**30
"""Most bytes a pickle may decompress to (a gzip bomb is refused when it passes this, having held one read)."""
MAX_PICKLE_ATOM = 2**20
"""Longest single string, bytes or text number (1 MiB): ids and scores are short."""
MAX_PICKLE_DEPTH = 16
"""Deepest container nesting: scores are two dicts deep."""
MAX_PICKLE_ITEMS = 2 * 10**9
"""Most container items in one pickle (about 500 million scored pairs fit)."""

_VALUES = {
    "NONE": None, "NEWTRUE": True, "NEWFALSE": False, "EMPTY_DICT": dict, "EMPTY_LIST": list, "EMPTY_TUPLE": tuple,
}
_ATOMS = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT", "STRING", "BINSTRING",
          "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "BINBYTES",
          "SHORT_BINBYTES", "BINBYTES8"}
_DROPPED = object()
"""The memo's entry for a value ``keep`` dropped: referring to it again is refused."""


class _Bounded:
    """A read-only stream that refuses to hand out more than the bounds allow (one read, one line, in all)."""

    def __init__(self, stream, path: Path):
        self.stream, self.path, self.total = stream, path, 0

    def tell(self) -> int:
        return self.total

    def _count(self, data: bytes) -> bytes:
        self.total += len(data)
        if self.total > MAX_PICKLE_BYTES:
            raise VtreproError(f"{self.path}: the pickle decompresses to more than {MAX_PICKLE_BYTES:,} bytes "
                               "(MAX_PICKLE_BYTES); refused")
        return data

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0 or size > MAX_PICKLE_ATOM:
            raise VtreproError(f"{self.path}: a pickle value declares {size:,} bytes, over the {MAX_PICKLE_ATOM:,} "
                               "a string or number may hold (MAX_PICKLE_ATOM); refused")
        return self._count(self.stream.read(size))

    def readline(self, size: int | None = -1) -> bytes:
        line = self.stream.readline(MAX_PICKLE_ATOM + 1)
        if len(line) > MAX_PICKLE_ATOM:
            raise VtreproError(f"{self.path}: a pickle text value is longer than {MAX_PICKLE_ATOM:,} bytes; refused")
        return self._count(line)


def _open(path: Path):
    with open(path, "rb") as handle:
        compressed = handle.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if compressed else open(path, "rb")


def read_plain_pickle(path: str | Path, keep: Callable[[Any], bool] | None = None) -> Any:
    """The plain data a pickle file (gzip'd or not) holds, read without unpickling; with ``keep``, the
    outermost dict keeps only the keys ``keep`` accepts. Anything but plain data, and anything over a bound,
    is refused with one line naming the file, the opcode and its byte offset."""
    path = Path(path)
    check_regular_file(path, MAX_PICKLE_FILE_BYTES, "give the pickle file as downloaded")
    with _open(path) as raw:
        try:
            return _interpret(pickletools.genops(cast(IO[bytes], _Bounded(raw, path))), path, keep)
        except VtreproError:
            raise
        except ValueError as error:
            if "before seeing STOP" in str(error):
                raise VtreproError(f"{path}: the pickle ends without its STOP opcode (truncated?)") from None
            raise VtreproError(f"{path}: not a readable pickle ({' '.join(str(error).split())[:160]})") from None
        except (EOFError, OSError, UnicodeDecodeError) as error:
            raise VtreproError(f"{path}: not a readable pickle ({' '.join(str(error).split())[:160]})") from None


def _interpret(ops, path: Path, keep: Callable[[Any], bool] | None) -> Any:
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[int, Any] = {}
    memo_keys: dict[int, int] = {}  # id of a remembered container -> its memo key, to forget it when dropped
    outermost: dict | None = None
    items = 0

    def refuse(what: str, position: int) -> VtreproError:
        return VtreproError(f"{path}: {what} at byte {position}; vtrepro reads only plain data (dicts, lists, "
                            "strings, numbers) from a pickle and never runs what one names")

    def since_mark(position: int) -> list[Any]:
        if not marks:
            raise refuse("a container closed without its MARK", position)
        start = marks.pop()
        taken = stack[start:]
        del stack[start:]
        return taken

    def fetch(key: int, position: int) -> Any:
        if key not in memo:
            raise refuse(f"a memo reference {key} to nothing", position)
        if memo[key] is _DROPPED:
            raise refuse("a reference to a dropped entry", position)
        return memo[key]

    for opcode, arg, position in ops:
        name = opcode.name
        if name in ("PROTO", "FRAME"):
            continue
        if name == "STOP":
            if len(stack) != 1 or marks:
                raise refuse("a pickle that does not end with exactly one value", position)
            return stack[0]
        if name in _ATOMS:
            stack.append(arg)
        elif name in _VALUES:
            value = _VALUES[name]
            stack.append(value() if callable(value) else value)
        elif name == "MARK":
            if len(marks) >= MAX_PICKLE_DEPTH:
                raise refuse(f"containers nested deeper than {MAX_PICKLE_DEPTH} (MAX_PICKLE_DEPTH)", position)
            marks.append(len(stack))
        elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            if not stack:
                raise refuse(f"{name} with nothing to remember", position)
            key = len(memo) if name == "MEMOIZE" else arg
            memo[key] = stack[-1]
            if isinstance(stack[-1], (dict, list)):
                memo_keys[id(stack[-1])] = key
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(fetch(arg, position))
        elif name in ("POP", "DUP", "POP_MARK"):
            if name == "POP_MARK":
                since_mark(position)
            elif not stack:
                raise refuse(f"{name} on an empty stack", position)
            else:
                stack.append(stack[-1]) if name == "DUP" else stack.pop()
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            size = int(name[-1])
            if len(stack) < size:
                raise refuse(f"{name} without its {size} values", position)
            stack[-size:] = [tuple(stack[-size:])]
        elif name in ("TUPLE", "LIST", "DICT"):
            taken = since_mark(position)
            items += len(taken)
            if name == "DICT":
                built: dict = {}
                _pairs(built, taken, None, path, position)
                stack.append(built)
            else:
                stack.append(tuple(taken) if name == "TUPLE" else taken)
        elif name in ("APPEND", "APPENDS", "SETITEM", "SETITEMS"):
            taken = since_mark(position) if name.endswith("S") else stack[-2 if name == "SETITEM" else -1:]
            if not name.endswith("S"):
                del stack[len(stack) - len(taken):]
            if not stack:
                raise refuse(f"{name} with no container", position)
            target = stack[-1]
            items += len(taken)
            if name.startswith("APPEND"):
                if not isinstance(target, list):
                    raise refuse(f"{name} to a {type(target).__name__}", position)
                target.extend(taken)
            else:
                if not isinstance(target, dict):
                    raise refuse(f"{name} to a {type(target).__name__}", position)
                for value in _pairs(target, taken, keep if target is outermost else None, path, position):
                    if id(value) in memo_keys:  # forget what was dropped, so its memory goes
                        memo[memo_keys.pop(id(value))] = _DROPPED
        else:
            raise refuse(f"opcode {name}", position)
        if outermost is None and len(stack) == 1 and isinstance(stack[0], dict):
            outermost = stack[0]  # the dict everything else goes into: the one ``keep`` filters
        if items > MAX_PICKLE_ITEMS:
            raise refuse(f"more than {MAX_PICKLE_ITEMS:,} container items (MAX_PICKLE_ITEMS)", position)
    raise AssertionError("pickletools.genops ends at STOP or raises")


def _pairs(target: dict, taken: list[Any], keep: Callable[[Any], bool] | None, path: Path, position: int) -> list:
    """Set the key/value pairs ``taken`` on ``target`` (those ``keep`` accepts); the values dropped."""
    if len(taken) % 2:
        raise VtreproError(f"{path}: a dict item without its value at byte {position}")
    dropped = []
    for key, value in zip(taken[::2], taken[1::2]):
        if isinstance(key, (list, dict)):
            raise VtreproError(f"{path}: an unhashable dict key at byte {position}")
        if keep is None or keep(key):
            target[key] = value
        elif isinstance(value, (dict, list)):
            dropped.append(value)
    return dropped
