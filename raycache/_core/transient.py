"""Which storage errors are the service failing (a 5xx answer, a dropped connection, a
timeout) rather than the data or the request: those that running again can cure."""

from __future__ import annotations

import errno

__all__ = ["is_transient"]

_ERRNOS = {errno.EBUSY, getattr(errno, "EREMOTEIO", errno.EIO), errno.ETIMEDOUT,
           errno.ECONNRESET, errno.ECONNREFUSED, errno.ECONNABORTED, errno.EPIPE}
"""What s3fs turns 503 SlowDown (EBUSY) and 500 InternalError (EREMOTEIO) into, and lost
connections."""
_CODES = {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling",
          "ThrottlingException", "RequestLimitExceeded", "503", "500", "502", "504"}
_LIBRARIES = ("botocore", "aiobotocore", "aiohttp", "urllib3", "requests", "http.client")


def is_transient(exc: BaseException) -> bool:
    """Whether `exc`, or an error it was raised from, is the store's service failing after its
    client's own retries: a 5xx or throttling answer, a connection dropped, reset or refused,
    a timeout. A missing object, a denied request or bad data is not."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, (ConnectionError, TimeoutError)):
            return True
        if isinstance(e, OSError) and not isinstance(e, FileNotFoundError) \
                and e.errno in _ERRNOS:
            return True
        response = getattr(e, "response", None)
        if isinstance(response, dict):  # botocore's ClientError
            error = response.get("Error", {})
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if str(error.get("Code", "")) in _CODES or (status or 0) >= 500:
                return True
        kind = type(e)
        if kind.__module__.split(".")[0] in {m.split(".")[0] for m in _LIBRARIES} and any(
                word in kind.__name__ for word in ("Connect", "Connection", "Timeout",
                                                   "Disconnected", "Payload", "Incomplete")):
            return True
        todo += [e.__cause__, e.__context__]
    return False
