"""The Dask worker plugin of ``tpde sweep --workers N`` (imported only with Dask installed)."""

from __future__ import annotations

import os

from distributed.diagnostics.plugin import WorkerPlugin

from ..workers import end_with_parent


class EndWithParent(WorkerPlugin):
    """Each worker process ends with the client process that started its LocalCluster
    (:func:`tpde.experiments.workers.end_with_parent`): a SIGKILL of ``tpde sweep`` leaves
    no worker computing for nobody."""

    idempotent = True

    def __init__(self, parent: int):
        self.parent = parent

    def setup(self, worker) -> None:
        if os.getppid() == self.parent:  # a LocalCluster's worker: a child of the client
            end_with_parent(self.parent)
