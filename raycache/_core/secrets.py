"""Credentials in storage options: which names hold one, and their sealed and redacted forms.

Options are sealed where a config or Store is built: every value under a secret name (at any
depth of nested dicts) becomes a `Secret`, whose repr, str and JSON form are `REDACTED`, so
printing, logging or recording a config never shows it. Only the call into fsspec `reveal`s.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["REDACTED", "SECRET_NAME", "Resolved", "Secret", "is_secret", "merge", "redact",
           "resolve", "resolved", "reveal", "seal", "split"]

REDACTED = "<redacted>"

SECRET_NAME = re.compile(
    r"(^|_)(key|keys|pkey|sas|sig|pwd|auth|jwt|dsn)(_|$)"  # whole words: key, account_key ...
    r"|tokens?(_|$)|secret|passw|passphrase|credential|authoriz|signature|cookie|private"
    r"|apikey|accesskey|accountkey|sessionkey|bearer|conn(ection)?_?str"
)
"""A name (snake or camel case, lowered, words joined by _) that holds a credential: fsspec's
(s3fs key, secret, token, session_token, client_kwargs' aws_secret_access_key; gcsfs token;
adlfs account_key, connection_string, sas_token, client_secret, credential; sftp/ssh password,
pkey, passphrase; http headers' Authorization) and their like."""


def is_secret(name: str) -> bool:
    """Whether an option of this name holds a credential (AccessKeyId, aws_session_token...)."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", str(name)).lower()
    return bool(SECRET_NAME.search(re.sub(r"[^a-z0-9]+", "_", snake)))


class Secret:
    """A credential's value: shown as REDACTED everywhere; `reveal()` gives it back."""

    __slots__ = ("_value",)

    def __init__(self, value: Any):
        self._value = value.reveal() if isinstance(value, Secret) else value

    def reveal(self) -> Any:
        return self._value

    def __repr__(self) -> str:
        return REDACTED

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(REDACTED)

    def __reduce__(self) -> tuple:
        return Secret, (self._value,)  # Ray's object store carries it to workers


def _pair(options: Any) -> bool:
    """A (name, value) pair whose name holds a credential: a header given as a tuple."""
    return (isinstance(options, list | tuple) and len(options) == 2
            and isinstance(options[0], str) and is_secret(options[0]))


def seal(options: Any) -> Any:
    """Options with every value under a secret name wrapped in a Secret (nested dicts too, and
    (name, value) pairs such as headers given as tuples)."""
    if isinstance(options, dict):
        return {k: Secret(v) if is_secret(k) else seal(v) for k, v in options.items()}
    if _pair(options):
        return type(options)((options[0], Secret(options[1])))
    if isinstance(options, list | tuple):
        return type(options)(seal(v) for v in options)
    return options


def reveal(options: Any) -> Any:
    """Options as fsspec takes them: every Secret replaced by its value."""
    if isinstance(options, Secret):
        return options.reveal()
    if isinstance(options, dict):
        return {k: reveal(v) for k, v in options.items()}
    if isinstance(options, list | tuple):
        return type(options)(reveal(v) for v in options)
    return options


def redact(options: Any) -> Any:
    """Options safe to write or print (plain JSON types): secret values become REDACTED."""
    if isinstance(options, Secret):
        return REDACTED
    if isinstance(options, dict):
        return {k: REDACTED if is_secret(k) else redact(v) for k, v in options.items()}
    if _pair(options):
        return [options[0], REDACTED]
    if isinstance(options, list | tuple):
        return [redact(v) for v in options]
    return options


def split(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(public, secret): the options without their credentials, and only the credentials (a
    list holding one goes whole to the secret side); merge(public, secret) rebuilds them."""
    public: dict[str, Any] = {}
    secret: dict[str, Any] = {}
    for k, v in options.items():
        if isinstance(v, dict) and not is_secret(k):
            pub, sec = split(v)
            public[k] = pub
            if sec:
                secret[k] = sec
        elif is_secret(k) or redact(v) != reveal(v):
            secret[k] = v
        else:
            public[k] = v
    return public, secret


def merge(public: dict[str, Any], secret: dict[str, Any]) -> dict[str, Any]:
    """The options that split() took apart, whole again."""
    out = dict(public)
    for k, v in secret.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class Resolved:
    """Sealed options and, once first asked (`fsspec`), their revealed form, kept: a listing's
    files share one, so a source's credentials are read once per listing, not once per open
    or check. Pickled as nothing (None): a file sent to a Ray worker opens with the sealed
    options it is given there, and no credential rides in the rows Ray Data moves."""

    __slots__ = ("_fsspec", "sealed")

    def __init__(self, options: Any):
        self.sealed = options.sealed if isinstance(options, Resolved) else seal(options)
        self._fsspec: Any = None

    @property
    def fsspec(self) -> Any:
        """The options as fsspec takes them, revealed on first use only."""
        if self._fsspec is None:
            self._fsspec = reveal(self.sealed)
        return self._fsspec

    def __repr__(self) -> str:
        return f"Resolved({self.sealed!r})"

    def __reduce__(self) -> tuple:
        return _dropped, ()


def _dropped() -> None:
    """What a pickled Resolved becomes."""
    return None


def resolved(options: Any) -> Resolved:
    """`options` as a Resolved (one given is handed on as it is)."""
    return options if isinstance(options, Resolved) else Resolved(options)


def resolve(options: Any) -> Any:
    """Options as fsspec takes them: a Resolved's kept form, or sealed options revealed."""
    return options.fsspec if isinstance(options, Resolved) else reveal(options)
