"""What every upstream API client (CalDAV, Google, Graph) shares: it holds an HTTP connection pool,
closed when the client is, by `with` or by close()."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Self


class UpstreamClient(ABC):
    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @abstractmethod
    def close(self) -> None: ...
