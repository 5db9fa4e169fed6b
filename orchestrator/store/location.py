"""Where the job store is: a SQLite file under the home folder, or a team's PostgreSQL URL.

`settings` is orch's Settings (or anything with its `home` and, optionally, `database_url`);
it is not imported here, as the store sits below the settings' layer.
"""

from __future__ import annotations

from typing import Any, Optional, TypeGuard
from urllib.parse import urlsplit, urlunsplit


def database_url(settings: Any) -> Optional[str]:
    """The PostgreSQL URL a team's store is at; None: SQLite under the home folder."""
    url = getattr(settings, "database_url", None)
    return url.get_secret_value() if url is not None else None


def is_database_url(where: object) -> TypeGuard[str]:
    return isinstance(where, str) and where.startswith(("postgresql://", "postgres://"))


def shown_url(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


def store_location(settings: Any) -> str:
    """Where the store is, as shown to a user: a file path, or the URL without its password."""
    url = database_url(settings)
    return shown_url(url) if url else str(settings.home / "orch.db")


def store_exists(settings: Any) -> bool:
    """Whether there is a store to read: the SQLite file exists, or a database URL is set
    (reading a PostgreSQL store that orch never wrote finds it empty, and creates its tables)."""
    return bool(database_url(settings)) or (settings.home / "orch.db").exists()
