"""Which code a head folder or a store may name: a factory path read back from a file runs only
where the caller trusts it (`trust_code`); one the user's own config names in this process is
theirs, and runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from raycache._errors import UntrustedCode

__all__ = ["TrustCode", "Trust", "problems", "vouch"]

TrustCode = bool | Sequence[str]
"""What a caller passes as `trust_code`: True (any code the file names), False (only the
registered head families and encoder kinds), or the prefixes of the factory paths it allows
("mypkg." for a package, "mypkg.enc:make" for one function)."""

FIX = ("pass trust_code=True (--trust-code) if you trust whoever wrote the file, or "
       "trust_code=[{prefix!r}] to allow that module")

_OWN: set[str] = set()
"""Factory paths this process's own fill and train configs named: the user's code."""


def vouch(refs: Iterable[str | None]) -> None:
    """Record the factory paths a user's own config names (fill, train): theirs to run later
    in this process, wherever a file names them again (the head trained on their fill)."""
    _OWN.update(r for r in refs if isinstance(r, str) and ":" in r)


def problems(value: object, name: str = "trust_code") -> list[str]:
    """What is wrong with a `trust_code` value (empty when nothing is)."""
    if isinstance(value, bool | Trust) or (isinstance(value, Sequence) and all(
            isinstance(p, str) and p for p in value)):
        return []
    return [f"{name}={value!r}: expected true, false or a list of factory path prefixes "
            "(e.g. [mypkg.])"]


def _matches(ref: str, prefix: str) -> bool:
    """`prefix` names `ref`'s module, a package above it, or the function itself ("my" is no
    prefix of "mypkg.x:f"; "my." or "my" of "my.x:f" is)."""
    if ref == prefix:
        return True
    return ref.startswith(prefix) and (prefix[-1] in ".:" or ref[len(prefix)] in ".:")


@dataclass(frozen=True)
class Trust:
    """The code a caller lets a file name: everything, or factory paths under `prefixes`."""

    everything: bool = False
    prefixes: tuple[str, ...] = ()

    @classmethod
    def of(cls, given: TrustCode | Trust | None) -> Trust:
        """The policy for a `trust_code` value, with this process's own factories added.

        Raises:
            TypeError: `given` is neither a bool nor a list of prefixes.
        """
        if isinstance(given, Trust):
            return cls(given.everything, tuple(sorted({*given.prefixes, *_OWN})))
        if given is None or isinstance(given, bool):
            return cls(bool(given), tuple(sorted(_OWN)))
        if isinstance(given, str):  # one prefix (a YAML scalar)
            given = [given]
        if problems(given):
            raise TypeError(problems(given)[0])
        return cls(False, tuple(sorted({*given, *_OWN})))

    def allows(self, ref: str) -> bool:
        """Whether the code `ref` ("module:function") may run."""
        return self.everything or any(_matches(ref, p) for p in self.prefixes)

    def given(self) -> bool | tuple[str, ...]:
        """This policy as a plain `trust_code` value, for another process (a Ray actor) whose
        own configs named nothing."""
        return True if self.everything else self.prefixes

    def check(self, where: str, ref: str, register: str) -> None:
        """Refuse `ref`, named by field `where` of a file, unless this policy allows it.

        Args:
            where: The file and field, e.g. "ckpt/head.json: head.head".
            ref: The code it names ("module:function").
            register: How to make it a registered kind instead (the other fix).

        Raises:
            UntrustedCode: `ref` is not allowed.
        """
        if self.allows(ref):
            return
        prefix = ref.partition(":")[0] + ":"
        raise UntrustedCode(
            f"{where}: {ref!r} is code, and a file's code runs only when trusted; "
            f"{FIX.format(prefix=prefix)}, or {register}", where, ref)
