"""A client's long new-spec operation priced by the legacy calls it makes.

A storage operation's base price (``quota/costs.py``) is paid when it is
called, before anyone knows how many descendants a prefix has. Its legacy
calls go through ``MeteredCaller``, which prices each as the same call from a
client would be priced (``base_cost``) and charges what goes beyond that base
price as it is spent, through ``charge`` (the quota's ``charge``: taken from
whatever is left, never failing the operation; the client's next calls may be
refused), as the bytes of a large answer are charged after it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from addon.quota.costs import base_cost
from addon.rpc.jsonrpc import Call
from addon.rpc.new_spec import LegacyCaller
from common.config.model import CostConfig


class MeteredCaller:
    """``inner``'s calls, each priced; units past ``prepaid`` go to ``charge``."""

    def __init__(
        self,
        inner: LegacyCaller,
        costs: CostConfig,
        prepaid: int,
        charge: Callable[[int], None],
    ) -> None:
        self.inner = inner
        self.costs = costs
        self.prepaid = prepaid
        self.charge = charge
        self.spent = 0  # units the legacy calls made so far are worth

    async def call(self, network: str, method: str, params: list[Any]) -> Any:
        if not self.costs.enabled:  # plain call counting: the call was its one unit
            return await self.inner.call(network, method, params)
        units = base_cost(Call(0, method, params), self.costs)
        before = max(self.spent, self.prepaid)
        self.spent += units
        if self.spent > before:
            self.charge(self.spent - before)
        return await self.inner.call(network, method, params)
