"""What a seam's adapter found in the installed vLLM: the shape the plugin
takes it in, or why it leaves that part to upstream."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Found:
    seam: str
    # The shape the plugin takes the seam in; None: the part stays upstream's.
    shape: str | None
    # Why the part stays upstream's ("" when taken).
    reason: str = ""

    @classmethod
    def taken(cls, seam: str, shape: str) -> Found:
        return cls(seam, shape)

    @classmethod
    def off(cls, seam: str, reason: str) -> Found:
        return cls(seam, None, reason)

    @property
    def is_taken(self) -> bool:
        return self.shape is not None


def shapes_of(found: dict[str, Found]) -> dict[str, str | None]:
    """Seam -> the shape it was found in (None: upstream's)."""
    return {seam: f.shape for seam, f in found.items()}
