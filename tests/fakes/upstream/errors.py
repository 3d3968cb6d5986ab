"""The fake's errors: one raised by any part of it and drawn by each wire in its vendor's envelope."""

from __future__ import annotations

from collections.abc import Mapping


class ApiError(Exception):
    """An error answer: status, message, the offending parameter (vLLM names it), extra headers."""

    def __init__(
        self, status: int, message: str, param: str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, dict(headers or {})


def invalid(message: str, param: str | None = None, value: object = None) -> ApiError:
    """A 400 worded like vLLM's ``VLLMValidationError``, whose ``str()`` appends parameter and value."""
    extras = ([f"parameter={param}"] if param else []) + ([f"value={value}"] if value is not None else [])
    return ApiError(400, f"{message} ({', '.join(extras)})" if extras else message, param)


class ClientGone(Exception):
    """The client closed the connection while the fake was still answering."""
