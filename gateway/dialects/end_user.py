"""The end-user id a client gave (OpenAI's ``user``, Anthropic's ``metadata.user_id``), as each
upstream's field takes it: as given where it fits that field's bounds, else a stable digest of it, so
that an id one vendor takes never makes another refuse the request (docs/dialects.md, "End-user ids").

The bounds, by vendor:
- OpenAI documents ``safety_identifier``, which supersedes ``user`` "for the same purpose", as at most
  64 characters, and refuses a longer ``user`` too (``string_above_max_length``). SGP passes ``user``
  on to the model's vendor, OpenAI among them; vLLM and OctoAI take any string. One bound for every
  OpenAI-shaped wire: 64. (Claude Code's ``metadata.user_id`` is about 150 characters.)
- Anthropic documents ``metadata.user_id`` as an opaque id of at most 256 characters (a uuid or a hash,
  never an email address or a phone number), and refuses one that looks like an email address.

What does not belong here: where each wire puts the id (its ``egress``).
"""

from __future__ import annotations

import base64
import hashlib

OPENAI_MAX = 64
ANTHROPIC_MAX = 256
OPAQUE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def digest(user: str) -> str:
    """A stable, opaque stand-in for ``user``: the same id always maps to the same 50 characters."""
    hashed = hashlib.sha256(user.encode()).digest()
    return "sha256-" + base64.urlsafe_b64encode(hashed).decode().rstrip("=")


def openai_user(user: str) -> str:
    """``user`` as an OpenAI-shaped wire's ``user`` field takes it."""
    return user if len(user) <= OPENAI_MAX else digest(user)


def anthropic_user(user: str) -> str:
    """``user`` as Anthropic's ``metadata.user_id`` takes it: an opaque id (letters, digits, ``_``, ``-``,
    a letter among them: digits alone may read as a phone number), else its digest."""
    opaque = len(user) <= ANTHROPIC_MAX and OPAQUE.issuperset(user) and not LETTERS.isdisjoint(user)
    return user if opaque else digest(user)
