"""A third-party scheduler transport with settings of its own: the in-process scheduler,
remembering the ``label`` of its ``[schedulers.labelled]`` table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import conveyor
from conveyor.settings import Field
from conveyor.transports.base import TransportContext


class LabelledTransport(conveyor.Scheduler):
    """Built by the worker as ``cls(TransportContext)``, like every transport."""

    settings_schema: ClassVar[Mapping[str, Field]] = {
        "label": Field("str", "unlabelled", doc="a name to find this transport by"),
    }
    built: ClassVar[list[LabelledTransport]] = []

    def __init__(self, context: TransportContext) -> None:
        super().__init__(context.scheduler)
        self.label = str(context.settings["label"])
        LabelledTransport.built.append(self)
