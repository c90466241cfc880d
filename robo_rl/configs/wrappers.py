"""(being written) typed configs: prefix -> `_target_` (FIXED: a block without one) -> dataclass."""

from __future__ import annotations

BLOCKS: dict[str, dict[str | None, type]] = {}
