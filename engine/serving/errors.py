"""What can go wrong talking to a serving engine: one ``ServingError`` subclass per kind of failure, each message a
complete sentence for the person who typed the URL (what happened, what to check)."""
from __future__ import annotations


class ServingError(RuntimeError):
    """Something went wrong talking to the server; ``str(e)`` is a complete sentence for the user."""

    kind = "error"


class BadURL(ServingError):
    kind = "bad URL"


class ServerUnreachable(ServingError):
    kind = "unreachable"


class ServerTimeout(ServingError):
    kind = "timeout"


class AuthFailed(ServingError):
    kind = "API key"


class ModelNotFound(ServingError):
    kind = "model not found"


class EndpointNotFound(ServingError):
    kind = "endpoint not found"


class NotStreaming(ServingError):
    kind = "not streaming"


class UnexpectedReply(ServingError):
    kind = "unexpected reply"


class NoLogprobs(ServingError):
    kind = "no logprobs"


class ServerError(ServingError):
    kind = "server error"


class RequestCancelled(ServingError):
    kind = "cancelled"


def snippet(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
