"""The outcome of a flow or of a JKO step: :class:`tpde._status.Status`, re-exported here."""

from tpde._status import STATUSES, Status, status_array

__all__ = ["STATUSES", "Status", "status_array"]
