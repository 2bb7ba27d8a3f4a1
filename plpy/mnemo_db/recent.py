"""What a backend computed lately, by a digest of the text it was computed from
(tokens.count, embedding.Embedder): an agent's next call brings back most of the
texts of its last, and a digest keeps 16 bytes of each, not the text."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any


def digest(text: str | None) -> bytes:
    """A text's key (16 bytes of blake2b)."""
    return hashlib.blake2b((text or "").encode("utf-8", "surrogatepass"), digest_size=16).digest()


class Recent:
    """The values of the `size` keys put or found last; the least recently used goes
    first. Thread-safe: a compile counts tokens on two threads and embeds on a third."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[bytes, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: bytes) -> Any:
        """The value kept for the key, or None."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: bytes, value: Any) -> Any:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            if len(self._items) > self.size:
                self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
