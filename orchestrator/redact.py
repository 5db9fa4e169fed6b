"""Secrets in a job: passed to it, never stored or shown. Which values are secret, and redaction.

A value is secret when the job file lists it under `secrets:`, or when its `envs:` name
looks like a credential (KEY, TOKEN, PASSWORD, SECRET, ...). orch keeps only a salted
digest of each secret value, so a log read later (after the submitting process is gone)
can still be redacted token by token.
"""

from __future__ import annotations

import hashlib
import re
import secrets as _random  # the standard library
from typing import Iterable, Mapping

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(r"KEY|TOKEN|PASSWORD|PASSWD|PASSPHRASE|SECRET|CREDENTIAL|PRIVATE|"
                          r"AUTH|SESSION|COOKIE|SIGNATURE|API_?PASS|DSN", re.I)
_MIN_LEN = 4  # shorter values ("1", "true") would redact half the log
# Words in a log that could be a secret value: runs between whitespace, quotes and separators.
_TOKEN = re.compile(r"""[^\s'"`=:,;()\[\]{}<>]{%d,}""" % _MIN_LEN)


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


def digest(value: str, salt: str) -> str:
    return hashlib.sha256(f"{salt}:{value}".encode()).hexdigest()


def digests(values: Iterable[str], salt: str) -> list[str]:
    return sorted({digest(v, salt) for v in values if len(v) >= _MIN_LEN})


def redact_text(text: str, values: Iterable[str] = (), salt: str = "",
                known: Iterable[str] = ()) -> str:
    """`text` with every secret replaced: the `values` orch holds now, and any word whose
    salted digest is in `known` (the digests kept with the job)."""
    for v in sorted((v for v in values if len(v) >= _MIN_LEN), key=len, reverse=True):
        text = text.replace(v, REDACTED)
    known = set(known)
    if known and salt:
        text = _TOKEN.sub(lambda m: REDACTED if digest(m.group(0), salt) in known else m.group(0),
                          text)
    return text
