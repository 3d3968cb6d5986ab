"""Upstream credentials that can change while the gateway runs: a target's ``api_key_env`` or
``api_key_file`` (a Kubernetes Secret mount, which the kubelet swaps in place).

A ``Secret`` holds the current value and re-reads its source when asked: on a config reload, when a
poll finds the file changed (``stale``: one ``stat``, no read), and when the upstream refused the key
and the source changed since it was read (``renewed``). A value that cannot be a key (a line break
inside, not UTF-8, over 16 KiB: ``gateway/runtime/keyfile.py``) is never used: the previous key
stays, or with none the target has no usable key (``problem``), and one log line says why each time
the reason changes. Values never appear in a log line or an exception message; the file's path and
the variable's name do.

Not here: when to poll (``gateway/web/reload.py``) or what to do with a refused key (``adapters``).
"""

from __future__ import annotations

import logging
import os

from gateway.runtime.config import Target
from gateway.runtime.keyfile import KeyProblem, read_key_file, usable_key

log = logging.getLogger("gateway.secrets")
Stamp = tuple[int, int, int]  # a file's (mtime ns, size, inode): Secret mounts change all three


def file_stamp(path: str) -> Stamp | None:
    try:
        st = os.stat(path)  # follows the mount's symlinks: a swapped ``..data`` is a new inode
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class Secret:
    """One credential source; ``value`` is None when neither a variable nor a file is configured."""

    __slots__ = ("env", "file", "problem", "stamp", "value")

    def __init__(self, env: str | None = None, file: str | None = None) -> None:
        self.env = env
        self.file = file
        self.value: str | None = None
        self.stamp: Stamp | None = None
        self.problem: str | None = None  # why the source's current content is not used, if it is not
        self.refresh()

    @classmethod
    def of(cls, target: Target) -> Secret:
        return cls(target.api_key_env, target.api_key_file)

    @property
    def source(self) -> str:
        """Where the value comes from, for log lines (never the value)."""
        return f"file {self.file}" if self.file else f"env {self.env}" if self.env else "none"

    def refresh(self) -> bool:
        """Reads the source again; True when the value changed. An unreadable, empty or unusable file
        keeps the value it had (a Secret mount is briefly empty while the kubelet swaps it)."""
        try:
            value = self._read()
        except (OSError, KeyProblem) as exc:
            self._trouble(exc.strerror if isinstance(exc, OSError) else str(exc))
            return False
        self._trouble(None)
        if value is None:
            return False
        changed = value != self.value
        self.value = value
        return changed

    def _read(self) -> str | None:
        if self.file is not None:
            self.stamp = file_stamp(self.file)  # usable or not, the next poll looks for the next change
            return read_key_file(self.file)
        if self.env is not None:
            return usable_key(os.environ.get(self.env, "").encode("utf-8", "surrogateescape"))
        return None

    def _trouble(self, problem: str | None) -> None:
        """Logs a problem with the source once, when it begins or changes, and when it ends."""
        if problem != self.problem:
            if problem is not None:
                keeps = "the previous key stays" if self.value is not None else "the target has no usable key"
                log.warning("upstream key %s unusable (%s): %s", self.source, problem, keeps)
            elif self.problem is not None:
                log.warning("upstream key %s usable again", self.source)
            self.problem = problem

    def stale(self) -> bool:
        """Whether the file changed since it was last read (always False for a variable)."""
        return self.file is not None and file_stamp(self.file) != self.stamp

    def renewed(self, sent: str | None) -> bool:
        """After the upstream refused ``sent``: True when the source now holds another key to try. A
        file is read again only when it changed since its last read: a refused key costs a ``stat``."""
        if self.file is None or self.stale():
            self.refresh()
        return self.value is not None and self.value != sent


class Secrets:
    """Every target's credential, one ``Secret`` per source, shared by the targets that name it and
    by the config generations that keep them."""

    __slots__ = ("by_source",)

    def __init__(self) -> None:
        self.by_source: dict[tuple[str | None, str | None], Secret] = {}

    def for_target(self, target: Target) -> Secret:
        source = (target.api_key_env, target.api_key_file)
        secret = self.by_source.get(source)
        if secret is None:
            secret = self.by_source[source] = Secret(*source)
        return secret

    def refresh(self) -> list[str]:
        """Re-reads every source; the sources whose value changed."""
        return [s.source for s in self.by_source.values() if s.refresh()]

    def refresh_stale(self) -> list[str]:
        """Re-reads the files that changed since their last read; the sources whose value changed."""
        return [s.source for s in self.by_source.values() if s.stale() and s.refresh()]
