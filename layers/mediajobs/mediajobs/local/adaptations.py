"""Where the embedded AWS changes moto, and how the change is undone.

moto's classes, modules and backends are the process's: an adaptation of moto (a method
replaced on a class, a module attribute set) is seen by every user of moto in the
process while it is there. The embedded AWS therefore applies its adaptations while it
runs and puts moto back when it stops: :class:`MotoAdaptations` counts the open users
(two stacks of one test, a server and a session inside it), applies every adaptation
when the first opens and undoes them, in reverse order, when the last closes. Each
adaptation records what it changes in a :class:`Patches`, which keeps what was there.

moto's state (its backends: buckets, tables, queues) is the process's too: without a
reset, a stack of one name finds the tables of an earlier stack of that name, items
included. So the first user also starts moto from empty and the last one leaves it empty,
as ``mock_aws`` does on its ``start`` and ``stop`` (moto 5.x, ``moto.core.models``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

log = logging.getLogger(__name__)

_MISSING = object()

A = TypeVar("A", bound="Adaptation")


class Patches:
    """Attributes set on objects (moto's classes and modules), each with what it replaced,
    so that :meth:`undo` puts every one back exactly: the same object where the owner had
    one of its own, nothing where the owner only inherited the attribute."""

    def __init__(self) -> None:
        self._undo: list[tuple[Any, str, Any]] = []

    def set(self, owner: Any, name: str, value: Any) -> Any:
        """Set ``owner.name`` to ``value``; returns what ``owner.name`` was (inherited or
        not), the original that a replacement usually calls -- ``None`` where moto has none
        (an operation it does not implement: undone, the attribute is removed again)."""
        original = getattr(owner, name, None)
        self._undo.append((owner, name, vars(owner).get(name, _MISSING)))
        setattr(owner, name, value)
        return original

    def undo(self) -> None:
        """Put back, newest first, what :meth:`set` replaced."""
        while self._undo:
            owner, name, before = self._undo.pop()
            if before is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, before)


class Adaptation(Protocol):
    """One change of moto's behaviour, applied with :meth:`apply` into ``patches`` (which
    undoes it)."""

    def apply(self, patches: Patches) -> None:
        """Change moto, recording every change in ``patches``."""


def reset_moto_state() -> None:
    """Empty every moto backend of the process (``BackendDict.reset``, what ``mock_aws``
    does on start and stop in moto 5.x), and forget moto's tracked model instances."""
    from moto.core.base_backend import BackendDict
    from moto.core.model_instances import reset_model_data

    BackendDict.reset()
    reset_model_data()


class MotoAdaptations:
    """The embedded AWS's adaptations of moto, reference-counted.

    Parameters
    ----------
    factories: each builds one fresh :class:`Adaptation` (an adaptation may hold state
        of its own, such as the S3 events' sequencers: a new one each time moto is adapted).
    reset: empties moto's state (default :func:`reset_moto_state`), when the first user
        opens and when the last one closes.
    """

    def __init__(
        self, factories: Sequence[Callable[[], Adaptation]], *, reset: Callable[[], None] = reset_moto_state
    ) -> None:
        self._factories = tuple(factories)
        self._reset = reset
        self._lock = threading.Lock()
        self._users = 0
        self._patches = Patches()
        self._active: list[Adaptation] = []

    @property
    def users(self) -> int:
        """How many users hold the adaptations now."""
        return self._users

    def acquire(self) -> None:
        """One more user: the first one resets moto's state and applies every adaptation.

        Raises
        ------
        Exception
            Whatever an adaptation raises (moto changed under it); what was applied
            before it is undone first.
        """
        with self._lock:
            if self._users == 0:
                self._reset()
                try:
                    for factory in self._factories:
                        adaptation = factory()
                        adaptation.apply(self._patches)
                        self._active.append(adaptation)
                except BaseException:
                    self._patches.undo()
                    self._active.clear()
                    raise
            self._users += 1

    def release(self) -> None:
        """One user fewer: the last one undoes every adaptation and resets moto's state.

        Raises
        ------
        RuntimeError
            If no user holds them.
        """
        with self._lock:
            if self._users == 0:
                raise RuntimeError("moto's adaptations released more often than acquired")
            self._users -= 1
            if self._users == 0:
                self._patches.undo()
                self._active.clear()
                self._reset()

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """:meth:`acquire` for the ``with`` block, then :meth:`release`."""
        self.acquire()
        try:
            yield
        finally:
            self.release()

    def active(self, kind: type[A]) -> A:
        """The applied adaptation of class ``kind``.

        Raises
        ------
        RuntimeError
            If none is applied (no embedded AWS is open in this process).
        """
        with self._lock:
            for adaptation in self._active:
                if isinstance(adaptation, kind):
                    return adaptation
        raise RuntimeError(f"no embedded AWS is open in this process ({kind.__name__} is not applied)")


class ModuleListCached:
    """moto's server (5.x) finds the service of every request by listing its own package
    folder (``moto.backends.list_of_moto_modules``: ``os.listdir`` and an ``isdir`` per
    entry, ~150 system calls). The list never changes while the process runs: it is
    computed once. Measured: ~2x more requests per second from 8 worker processes
    (``mediajobs simulate``)."""

    def apply(self, patches: Patches) -> None:
        """Replace ``moto.backends.list_of_moto_modules`` by the list it gives now."""
        from moto import backends

        modules = tuple(backends.list_of_moto_modules())

        def cached() -> tuple[str, ...]:
            return modules

        patches.set(backends, "list_of_moto_modules", cached)
