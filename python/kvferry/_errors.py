"""kvferry's exceptions: one class per kvferry Status code, all subclasses of KvferryError.

Every failing call of the extension raises the class of its code. The exception carries
``code`` (a :class:`kvferry.StatusCode`) and ``message``; each class also derives from the
built-in exception a Python caller would expect (``ValueError`` for bad input, ``LookupError``
for something unknown, ``TimeoutError`` for a deadline, ``ConnectionError`` for a peer gone).
"""


class KvferryError(Exception):
    """A kvferry call failed. ``code`` says what to do next; ``message`` says what happened."""

    code_name = "INTERNAL"

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        self.code = code

    def __str__(self):
        return f"{self.code_name}: {self.message}"


class InvalidArgumentError(KvferryError, ValueError):
    """Bad input (descriptors, metadata, options): fix the input, do not retry."""
    code_name = "INVALID_ARGUMENT"


class OutOfRangeError(KvferryError, IndexError):
    """An index or range outside what exists."""
    code_name = "OUT_OF_RANGE"


class NotFoundError(KvferryError, LookupError):
    """The named region, peer or transfer does not exist (or no longer does)."""
    code_name = "NOT_FOUND"


class AlreadyExistsError(KvferryError):
    """The thing is already there."""
    code_name = "ALREADY_EXISTS"


class FailedPreconditionError(KvferryError):
    """The object is not in a state for this call (e.g. a transfer already in flight)."""
    code_name = "FAILED_PRECONDITION"


class ResourceExhaustedError(KvferryError):
    """Out of memory, blocks or slots: retry later."""
    code_name = "RESOURCE_EXHAUSTED"


class UnavailableError(KvferryError, ConnectionError):
    """The peer is unreachable or gone: retry, possibly elsewhere."""
    code_name = "UNAVAILABLE"


class DeadlineExceededError(KvferryError, TimeoutError):
    """The deadline passed; the operation may still be in flight."""
    code_name = "DEADLINE_EXCEEDED"


class AbortedError(KvferryError):
    """Cancelled, or lost a race: restart it."""
    code_name = "ABORTED"


class DataLossError(KvferryError):
    """Bytes are not what they should be (corrupt, stale generation)."""
    code_name = "DATA_LOSS"


class UnimplementedError(KvferryError, NotImplementedError):
    """Not supported by this build or backend."""
    code_name = "UNIMPLEMENTED"


class InternalError(KvferryError):
    """A broken invariant inside kvferry: a bug, please report it."""
    code_name = "INTERNAL"


class UnauthenticatedError(KvferryError, PermissionError):
    """The caller did not prove who it is."""
    code_name = "UNAUTHENTICATED"


# In kvferry::StatusCode order (kOk = 0 has no exception). The extension indexes this tuple.
BY_CODE = (
    None, InvalidArgumentError, OutOfRangeError, NotFoundError, AlreadyExistsError,
    FailedPreconditionError, ResourceExhaustedError, UnavailableError, DeadlineExceededError,
    AbortedError, DataLossError, UnimplementedError, InternalError, UnauthenticatedError,
)
