"""The requests of a serving run: lengths, arrival times, traces (``tpsim serve``'s workload).

Every random draw comes from one seeded :class:`numpy.random.Generator` per stream
(arrivals, prompt lengths, output lengths: ``SeedSequence(seed).spawn(3)``), so the same seed
gives the same requests, and changing the arrival process leaves the lengths as they were.

Lengths (``--prompt-len``, ``--output-len``): ``N`` (``4K`` = 4096), ``uniform:A-B`` (whole
numbers from A to B, both included), ``normal:MEAN,STD`` and ``lognormal:MEAN,STD`` (MEAN and
STD of the lengths themselves; rounded, at least 1), or a file of lengths (one whole number a
line, ``#`` comments), drawn from with replacement.

Arrivals (``--rate R``): ``poisson`` (exponential gaps of mean 1/R), ``constant`` (1/R
apart) or ``gamma`` (gaps of mean 1/R and coefficient of variation ``--burstiness CV``:
shape 1/CV², as ``vllm bench serve --burstiness`` with its factor = 1/CV²). The first
request arrives at 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from tpsim.calibration.bounded import ReadRefused, read_lines, shorten
from tpsim.core.config import parse_tokens
from tpsim.core.errors import ConfigError

ARRIVALS = ("poisson", "constant", "gamma")
#: Bounds on what one run simulates.
MAX_REQUESTS = 1_000_000  # a million requests: minutes of simulation
MAX_LENGTH = 1 << 20
MAX_FILE_BYTES = 256 << 20


@dataclass(frozen=True)
class Lengths:
    """A distribution of token counts (see the module's docstring)."""

    kind: str  # fixed | uniform | normal | lognormal | file
    a: float = 0.0
    b: float = 0.0
    values: tuple[int, ...] = ()

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            return np.full(n, int(self.a), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.a), int(self.b) + 1, size=n, dtype=np.int64)
        if self.kind == "normal":
            x = rng.normal(self.a, self.b, size=n)
        elif self.kind == "lognormal":
            sigma2 = math.log(1 + (self.b / self.a) ** 2)
            x = rng.lognormal(math.log(self.a) - sigma2 / 2, math.sqrt(sigma2), size=n)
        else:
            return np.asarray(self.values, dtype=np.int64)[rng.integers(0, len(self.values), n)]
        return np.clip(np.rint(x), 1, MAX_LENGTH).astype(np.int64)

    @property
    def mean(self) -> float:
        """The mean length it draws (a normal's once cut at 1 token)."""
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        if self.kind == "file":
            return sum(self.values) / len(self.values)
        return self.clipped_mean

    @property
    def clipped_mean(self) -> float:
        """A normal's mean once cut at 1 token (``E[max(1, X)]``); other kinds: their own
        mean is kept (``a`` for fixed, lognormal and normal unclipped)."""
        if self.kind != "normal" or self.b <= 0:
            return self.a
        z = (1.0 - self.a) / self.b
        below = 0.5 * math.erfc(-z / math.sqrt(2.0))  # P(X < 1)
        density = math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
        return below + self.a * (1 - below) + self.b * density

    @property
    def largest(self) -> int | None:
        """The longest it draws, or None where it has no bound below the clip (normal,
        lognormal)."""
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return int(self.b)
        if self.kind == "file":
            return max(self.values)
        return None


def _bad(flag: str, text: str, why: str) -> ConfigError:
    return ConfigError(f"{flag}={shorten(text, 60)}: {why}")


def _whole(flag: str, text: str, part: str) -> int:
    try:
        n = parse_tokens(part, flag)
    except ConfigError:
        raise _bad(flag, text, "lengths must be whole numbers of tokens >= 1") from None
    if n > MAX_LENGTH:
        raise _bad(flag, text, f"lengths must be at most {MAX_LENGTH}")
    return n


def _positive(flag: str, text: str, part: str) -> float:
    try:
        x = float(part)
    except ValueError:
        raise _bad(flag, text, f"{part.strip()!r} is not a number") from None
    if not math.isfinite(x) or x < 0 or x > MAX_LENGTH:
        raise _bad(flag, text, f"{part.strip()!r} must be between 0 and {MAX_LENGTH}")
    return x


def parse_lengths(flag: str, text: str) -> Lengths:
    """``--prompt-len``/``--output-len``: a ConfigError naming the flag for a bad value."""
    t = str(text).strip()
    kind, sep, rest = t.partition(":")
    kind = kind.strip().lower()
    if not sep:
        if t and (t[0].isdigit() or t[0] == "." or (t[0] in "+-" and t[1:2].isdigit())):
            return Lengths("fixed", _whole(flag, t, t))  # a signed number: not a file name
        return _from_file(flag, t)
    if kind == "uniform":
        lo, dash, hi = rest.partition("-")
        if not dash:
            raise _bad(flag, t, "uniform needs A-B, e.g. uniform:100-2000")
        a, b = _whole(flag, t, lo), _whole(flag, t, hi)
        if a > b:
            raise _bad(flag, t, f"uniform:{a}-{b} is empty (A must be <= B)")
        return Lengths("uniform", a, b)
    if kind in ("normal", "lognormal"):
        m, comma, s = rest.partition(",")
        if not comma:
            raise _bad(flag, t, f"{kind} needs MEAN,STD, e.g. {kind}:1000,300")
        mean, std = _positive(flag, t, m), _positive(flag, t, s)
        if mean < 1:
            raise _bad(flag, t, "MEAN must be at least 1 token")
        return Lengths(kind, mean, std)
    if len(kind) == 1 and rest.startswith(("\\", "/")):  # a Windows drive letter
        return _from_file(flag, t)
    raise _bad(flag, t, "must be N, uniform:A-B, normal:MEAN,STD, lognormal:MEAN,STD or a file")


def _from_file(flag: str, path: str) -> Lengths:
    if not path:
        raise _bad(
            flag, path, "must be N, uniform:A-B, normal:MEAN,STD, lognormal:MEAN,STD or a file"
        )
    values: list[int] = []
    try:
        for k, line in enumerate(read_lines(path, MAX_FILE_BYTES), 1):
            s = line.split("#", 1)[0].strip()
            if not s:
                continue
            try:
                n = int(s)
            except ValueError:
                raise _bad(
                    flag, path, f"line {k}: {shorten(s, 30)!r} is not a whole number"
                ) from None
            if not 1 <= n <= MAX_LENGTH:
                raise _bad(flag, path, f"line {k}: {n} must be from 1 to {MAX_LENGTH}")
            values.append(n)
    except FileNotFoundError:
        raise _bad(
            flag, path, "no such file (and not N, uniform:A-B, normal:M,S, lognormal:M,S)"
        ) from None
    except (ReadRefused, OSError, UnicodeDecodeError) as e:
        raise _bad(flag, path, f"cannot read it: {shorten(str(e), 80)}") from None
    if not values:
        raise _bad(flag, path, "the file holds no lengths")
    return Lengths("file", values=tuple(values))


@dataclass(frozen=True)
class Requests:
    """What the clients send: per request its prompt and output tokens, in an open loop its
    arrival time (seconds from the start; empty in a closed loop), and the prefix it shares
    with other requests, if any."""

    prompt: tuple[int, ...]
    output: tuple[int, ...]
    arrival_s: tuple[float, ...] = ()
    #: per request, a prefix group (-1: none) and how many of its first prompt tokens every
    #: request of the group shares (a system prompt); empty: no request shares a prefix
    group: tuple[int, ...] = ()
    shared: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.prompt)


def streams(seed: int) -> tuple[np.random.Generator, ...]:
    """The arrival, prompt-length and output-length generators of ``seed``."""
    return tuple(np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))


def gaps(rng: np.random.Generator, n: int, rate: float, arrivals: str, cv: float) -> np.ndarray:
    """``n`` gaps between arrivals at ``rate`` per second."""
    mean = 1.0 / rate
    if arrivals == "constant" or (arrivals == "gamma" and cv == 0):
        return np.full(n, mean)
    if arrivals == "poisson":
        return rng.exponential(mean, n)
    shape = 1.0 / (cv * cv)
    return rng.gamma(shape, mean / shape, n)


def arrival_times(
    rng: np.random.Generator, rate: float, arrivals: str, cv: float, *, requests: int = 0,
    duration_s: float | None = None,
) -> np.ndarray:  # fmt: skip
    """Arrival times from 0: ``requests`` of them, or every one before ``duration_s``."""
    if duration_s is None:
        g = gaps(rng, max(requests - 1, 0), rate, arrivals, cv)
        return np.concatenate(([0.0], np.cumsum(g)))
    if rate * duration_s > MAX_REQUESTS:
        raise ConfigError(
            f"--duration={duration_s:g}: about {rate * duration_s:,.0f} requests at "
            f"{rate:g} req/s, at most {MAX_REQUESTS:,}"
        )
    times: list[np.ndarray] = [np.zeros(1)]
    last, block = 0.0, max(64, min(int(rate * duration_s * 1.2) + 1, MAX_REQUESTS))
    while last < duration_s:
        t = last + np.cumsum(gaps(rng, block, rate, arrivals, cv))
        times.append(t)
        last = float(t[-1])
        if sum(len(x) for x in times) > MAX_REQUESTS + block:
            break
    out = np.concatenate(times)
    out = out[out < duration_s]
    if len(out) > MAX_REQUESTS:
        raise ConfigError(
            f"--duration={duration_s:g}: {len(out):,} requests at this rate, "
            f"at most {MAX_REQUESTS:,}"
        )
    return out


def synthetic(
    seed: int, prompt: Lengths, output: Lengths, *, count: int, arrival_s: np.ndarray | None
) -> Requests:
    """``count`` requests with lengths drawn from ``prompt`` and ``output``."""
    _, rp, ro = streams(seed)
    p = prompt.draw(rp, count)
    o = output.draw(ro, count)
    times = () if arrival_s is None else tuple(float(t) for t in arrival_s)
    return Requests(tuple(int(x) for x in p), tuple(int(x) for x in o), times)


__all__ = [
    "ARRIVALS",
    "Lengths",
    "Requests",
    "arrival_times",
    "parse_lengths",
    "streams",
    "synthetic",
]
