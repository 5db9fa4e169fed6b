"""Secrets in a job: passed to it, never stored or shown. Which values are secret, and redaction.

A value is secret when the job file lists it under `secrets:`, or when its `envs:` name
looks like a credential (KEY, TOKEN, PASSWORD, SECRET, ...). orch keeps only a digest of
each secret value, so a log read later (after the submitting process is gone) can still
be redacted token by token. The digest is HMAC-SHA256 under the store's secret key (a
0600 file in ORCH_HOME, `store_key`), so a copy of the store alone cannot test guesses
of a short token against it. Records from before the key carry salted SHA-256 digests;
those are still recognized.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets as _random  # the standard library
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Optional, overload

from orchestrator.base.errors import StoreError

REDACTED = "<redacted>"
KEY_FILE = "secret_key"
KEY_BYTES = 32
_SECRET_NAME = re.compile(r"KEY|TOKEN|PASSWORD|PASSWD|PASSPHRASE|SECRET|CREDENTIAL|PRIVATE|"
                          r"AUTH|SESSION|COOKIE|SIGNATURE|API_?PASS|DSN", re.I)
_MIN_LEN = 4  # shorter values ("1", "true") would redact half the log
# Words in a log that could be a secret value: runs between whitespace, quotes and separators.
_TOKEN = re.compile(r"""[^\s'"`=:,;()\[\]{}<>]{""" + str(_MIN_LEN) + ",}")


def looks_secret(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def secret_env(spec_envs: Mapping[str, object], secrets: Mapping[str, str]) -> dict[str, str]:
    """The subset of a job's environment that is secret: `secrets:` and credential-like envs."""
    out = {k: str(v) for k, v in spec_envs.items() if v is not None and looks_secret(k)}
    out.update(secrets)
    return out


def redact_spec(spec: dict) -> dict:
    """The spec as stored: secret values replaced (the names stay, to show what was given)."""
    spec = dict(spec)
    spec["envs"] = {k: (REDACTED if v is not None and looks_secret(k) else v)
                    for k, v in (spec.get("envs") or {}).items()}
    spec["secrets"] = {k: REDACTED for k in (spec.get("secrets") or {})}
    return spec


def new_salt() -> str:
    return _random.token_hex(8)


@overload
def store_key(home: Path, create: Literal[True] = True, file: Optional[Path] = None) -> bytes: ...
@overload
def store_key(home: Path, create: bool, file: Optional[Path] = None) -> Optional[bytes]: ...
def store_key(home: Path, create: bool = True, file: Optional[Path] = None) -> Optional[bytes]:
    """The store's secret key, HOME/secret_key (0600), made on first use; None when there
    is none and `create` is False.

    The key is a file on the machine running orch, whichever store it uses. With a
    PostgreSQL store shared by a team, the digests of a job are made under the key of the
    machine that recorded it (for jobs sent to `orch serve`, the server's): another machine
    reading that job's log directly from the database redacts only the values it holds
    itself, not by digest. Losing the file loses log redaction by digest for the jobs
    recorded under it, nothing else. Replicas of `orch serve` on one store share one key:
    `file` (the secret_key_file setting) names it in place of HOME/secret_key."""
    path = Path(file) if file else Path(home) / KEY_FILE
    if path.exists():
        return _read_key(path)
    if not create:
        return None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{_random.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)  # whatever the umask
            f.write(_random.token_bytes(KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
        try:  # whole or not at all, and never over a key another orch made meanwhile
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:  # a filesystem without hard links
            if not path.exists():
                os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    key = path.read_bytes()
    if len(key) != KEY_BYTES:
        raise StoreError(f"{path}: not an orch secret key ({len(key)} bytes, not {KEY_BYTES})",
                         "move it away; orch makes a new one (logs of jobs recorded under "
                         "the old one are then redacted only of values orch holds)")
    return key


def digest(value: str, salt: str, key: bytes) -> str:
    """HMAC-SHA256 of a secret value under the store's key, salted per job."""
    return hmac.new(key, f"{salt}:{value}".encode(), hashlib.sha256).hexdigest()


def legacy_digest(value: str, salt: str) -> str:
    """The salted SHA-256 that orch kept before the store had a key."""
    return hashlib.sha256(f"{salt}:{value}".encode()).hexdigest()


def digests(values: Iterable[str], salt: str, key: bytes) -> list[str]:
    return sorted({digest(v, salt, key) for v in values if len(v) >= _MIN_LEN})


def head_tag(head: str, salt: str, key: bytes) -> str:
    """A short keyed tag of a value's first _MIN_LEN characters: where a digest search may
    start (24 bits: it tells nothing without the key, and lets most places be passed over)."""
    return hmac.new(key, f"{salt}:head:{head}".encode(), hashlib.sha256).hexdigest()[:6]


def heads(values: Iterable[str], salt: str, key: bytes) -> list[str]:
    return sorted({head_tag(v[:_MIN_LEN], salt, key) for v in values if len(v) >= _MIN_LEN})


def heads_info(values: Iterable[str], salt: str, key: bytes) -> dict[str, list[str]]:
    """What a job's record keeps for a bounded digest search (`Redactor`'s `heads`)."""
    return {"secret_heads": heads(values, salt, key)}


def lengths(values: Iterable[str]) -> list[int]:
    """The lengths of the values that digests are kept for: where a later reader looks for
    them in a text (a length says little of a value; the digest needs the store's key)."""
    return sorted({len(v) for v in values if len(v) >= _MIN_LEN})


# A place where a secret may start or end in a text: its ends, and beside any character
# that is not a letter or a digit (a space, '.', '&', '/', '=', ':', a quote...).
_EDGE = re.compile(r"[^A-Za-z0-9]")


def _edges(text: str) -> set[int]:
    edges = {0, len(text)}
    for m in _EDGE.finditer(text):
        edges.add(m.start())
        edges.add(m.end())
    return edges


class Redactor:
    """One job's redaction: the values this process holds, and the digests (with the
    lengths) its record keeps, matched anywhere in a text, not only as whole words.

    Held values are replaced wherever they occur. A value known only by its digest (a log
    read after the process that launched the job is gone) is found by trying each stretch
    of the text of a kept length that holds no whitespace and starts and ends at an edge
    (beside whitespace, the text's ends, or a character that is not a letter or digit):
    `token is VALUE.`, `?t=VALUE&a=1`, `/p/VALUE/x`, `pw:VALUE`, `VALUE==`. A value glued to
    letters or digits on a side (`xVALUE`), or holding whitespace, is found only while it
    is held.

    The search costs a bounded amount per byte of text: with the tags of the values' heads
    (`heads`, kept since issue 47) a place is hashed in full only where its first characters
    carry a kept head's tag; each distinct head and each distinct stretch is hashed once per
    text; a record without heads has each place tried once per kept length."""

    def __init__(self, values: Iterable[str] = (), salt: str = "", known: Iterable[str] = (),
                 key: Optional[bytes] = None, legacy: Iterable[str] = (),
                 sizes: Iterable[int] = (), heads: Iterable[str] = ()):
        self.values = sorted({v for v in values if len(v) >= _MIN_LEN}, key=len, reverse=True)
        self.salt = salt
        self.key = key
        self.known = set(known) if key and salt else set()
        self.legacy = set(legacy) if salt else set()
        self.sizes = sorted({n for n in sizes if n >= _MIN_LEN})
        self.heads = frozenset(heads)
        if self.known and self.key:  # digests of values held need no search
            self.known -= {digest(v, salt, self.key) for v in self.values}
        if self.legacy:
            self.legacy -= {legacy_digest(v, salt) for v in self.values}

    def __bool__(self) -> bool:
        return bool(self.values or self.known or self.legacy)

    def __call__(self, text: Optional[str]) -> str:
        if not text:
            return text or ""
        for v in self.values:
            text = text.replace(v, REDACTED)
        if self.known and self.sizes:
            text = self._search(text)
        if (self.known and not self.sizes) or self.legacy:  # records from before the lengths
            text = _TOKEN.sub(self._word, text)
        return text

    def tree(self, value: Any) -> Any:
        """A value decoded from a job's text (its metrics: JSON objects, lists, strings),
        each string in it redacted, keys included; numbers and the rest as they are."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {(self(k) if isinstance(k, str) else k): self.tree(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.tree(v) for v in value]
        return value

    def _hit(self, w: str) -> bool:
        return bool((self.known and self.key and digest(w, self.salt, self.key) in self.known)
                    or (self.legacy and legacy_digest(w, self.salt) in self.legacy))

    def _word(self, m: re.Match) -> str:
        return REDACTED if self._hit(m.group(0)) else m.group(0)

    def _search(self, text: str) -> str:
        """Each run of the text without whitespace that could hold a kept length: its
        stretches of those lengths between edges, by digest. A run shorter than the shortest
        value is never hashed, so ordinary prose costs almost nothing."""
        assert self.key is not None  # self.known is empty without one
        base = hmac.new(self.key, f"{self.salt}:".encode(), hashlib.sha256)
        head_base = hmac.new(self.key, f"{self.salt}:head:".encode(), hashlib.sha256)
        tags: dict[str, bool] = {}  # a head seen in this text: whether its tag is kept
        seen: dict[str, bool] = {}  # a stretch hashed in this text: whether it is a value
        out, done = [], 0
        for run in re.finditer(r"\S{" + str(self.sizes[0]) + ",}", text):
            word, offset = run.group(0), run.start()
            edges = _edges(word)
            last = 0
            for start in sorted(edges):
                if start < last:
                    continue
                if self.heads:
                    head = word[start:start + _MIN_LEN]
                    kept = tags.get(head)
                    if kept is None:
                        if len(tags) > 100_000:  # a text of many distinct heads: memory bounded
                            tags.clear()
                        t = head_base.copy()
                        t.update(head.encode())
                        kept = tags[head] = t.hexdigest()[:6] in self.heads
                    if not kept:
                        continue
                for n in reversed(self.sizes):  # the longest first: a value holding another
                    end = start + n
                    if end not in edges:
                        continue
                    stretch = word[start:end]
                    hit = seen.get(stretch)
                    if hit is None:  # each distinct stretch hashed once per text
                        if len(seen) > 100_000:
                            seen.clear()
                        h = base.copy()
                        h.update(stretch.encode())
                        hit = seen[stretch] = h.hexdigest() in self.known
                    if hit:
                        out += [text[done:offset + start], REDACTED]
                        last, done = end, offset + end
                        break
        out.append(text[done:])
        return "".join(out)


def key_id(key: bytes) -> str:
    """A name for a secret key that tells nothing of it: replicas compare theirs by it."""
    return hmac.new(key, b"orch secret key id", hashlib.sha256).hexdigest()[:16]
