"""Pipeline families: `adapter_for(pipe)` answers what differs between SD 1.x/2.x, SDXL, SD3, Flux and PixArt."""

from __future__ import annotations

from typing import Any

from ghostviewer.engine.families.base import FamilyAdapter
from ghostviewer.engine.families.flux import FluxAdapter
from ghostviewer.engine.families.pixart import PixArtAdapter
from ghostviewer.engine.families.sd import SDAdapter
from ghostviewer.engine.families.sd3 import SD3Adapter
from ghostviewer.engine.families.sdxl import SDXLAdapter

# Most specific first; the generic adapter answers for anything else.
ADAPTERS: tuple[FamilyAdapter, ...] = (SD3Adapter(), FluxAdapter(), PixArtAdapter(), SDXLAdapter(), SDAdapter())
GENERIC = FamilyAdapter()


def adapter_for(pipe: Any) -> FamilyAdapter:
    """The adapter of the pipeline's family (by its denoiser, else its class name); the generic one otherwise."""
    return next((adapter for adapter in ADAPTERS if adapter.matches(pipe)), GENERIC)


__all__ = ["ADAPTERS", "GENERIC", "FamilyAdapter", "adapter_for"]
