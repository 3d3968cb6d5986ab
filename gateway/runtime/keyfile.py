"""What makes an upstream key usable: the one check a key file's or variable's value must pass before
it goes into a request header, shared by the config's start-up check and the running ``Secret``.

A key is at most ``MAX_KEY_BYTES`` of UTF-8 text with nothing an HTTP header cannot carry (a line
break in the middle, a control character, non-ASCII), surrounding blanks and line breaks removed. A
refusal says why in words that never quote the key.
"""

from __future__ import annotations

MAX_KEY_BYTES = 16 * 1024  # far above any vendor's key or token; a 1 MB file is a mistake


class KeyProblem(ValueError):
    """Why a key cannot be used; its message never holds the key's bytes."""


def usable_key(raw: bytes) -> str | None:
    """The key ``raw`` holds (None when it is blank), or ``KeyProblem`` saying why it cannot be used."""
    if len(raw) > MAX_KEY_BYTES:
        raise KeyProblem(f"longer than {MAX_KEY_BYTES // 1024} KiB")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise KeyProblem(f"not UTF-8 text (byte {exc.start})") from None
    bad = next((i for i, c in enumerate(text) if not " " <= c <= "~"), None)
    if bad is not None:
        what = "a line break" if text[bad] in "\r\n" else "a character an HTTP header cannot carry"
        raise KeyProblem(f"{what} at character {bad}")
    return text or None


def read_key_file(path: str) -> str | None:
    """The key in the file at ``path`` (None when blank); ``OSError`` or ``KeyProblem`` otherwise."""
    with open(path, "rb") as f:
        return usable_key(f.read(MAX_KEY_BYTES + 1))
