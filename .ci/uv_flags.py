"""The package indexes pip is configured with on this machine, as flags for `uv pip install`.

uv installs the same wheels as pip much faster (a fresh `.venv` with compiled bytecode: under
45 s against 113 s here), but it does not read pip's configuration: where pip is pointed at
a mirror, local wheels or a constraints file (pip.conf, PIP_* variables), uv must be told
too. Prints nothing when pip has no such settings (uv then uses PyPI, as pip would).
"""

from __future__ import annotations

import shlex
import subprocess
import sys

# pip's key → uv's flag; each value may list several, space-separated.
FLAGS = {
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "index-url": "--index-url",
}


def pip_settings(pip: list[str]) -> list[tuple[str, str]]:
    """(key, value) of every scope `pip config list` shows (global, user, site, :env:); `pip`
    is the command that runs pip (`pip`, or `python3 -m pip`)."""
    out = subprocess.run([*pip, "config", "list"], capture_output=True, text=True).stdout
    pairs = []
    for line in out.splitlines():
        name, sep, value = line.partition("=")
        if sep:
            pairs.append((name.rpartition(".")[2], value.strip().strip("'\"")))
    return pairs


def uv_flags(pairs: list[tuple[str, str]]) -> list[str]:
    """Each (flag, value) once, in pip's order (the same setting often shows in two scopes)."""
    chosen = dict.fromkeys((FLAGS[key], item) for key, value in pairs if key in FLAGS
                           for item in value.split())
    flags = [part for pair in chosen for part in pair]
    if "--extra-index-url" in flags or "--find-links" in flags:
        # pip takes the best version across all its indexes; uv stops at the first index that
        # has a package unless told otherwise.
        flags += ["--index-strategy", "unsafe-best-match"]
    return flags


if __name__ == "__main__":
    print(shlex.join(uv_flags(pip_settings(sys.argv[1:] or ["pip"]))))
