"""Domain errors. They carry no HTTP: `app.http.server` maps each kind to a status in one table."""

from __future__ import annotations


class ServiceError(Exception):
    """Base of the errors a client can be told about."""

    code = "server_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class InvalidInput(ServiceError):
    """The request is well-formed but a value is not acceptable (unknown voice, speed out of range)."""

    code = "invalid_value"


class InvalidType(ServiceError):
    """A field has the wrong JSON type, or the body is not a JSON object."""

    code = "invalid_type"


class InputTooLarge(ServiceError):
    """The text is longer than the configured limit."""

    code = "input_too_large"


class Overloaded(ServiceError):
    """Every stream is busy and the wait queue is full."""

    code = "overloaded"

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unavailable(ServiceError):
    """The server cannot serve now (shutting down, or inference state failed to load)."""

    code = "unavailable"


class Unauthorized(ServiceError):
    """A bearer token is required and was missing or wrong."""

    code = "unauthorized"


class Disabled(ServiceError):
    """The endpoint is switched off by configuration."""

    code = "disabled"


class NoTimestamps(ServiceError):
    """Word timestamps were asked for, and the served model does not output the durations they need."""

    code = "timestamps_unavailable"


class InferenceFailed(ServiceError):
    """The runtime raised during one inference; only that request fails."""

    code = "inference_failed"
