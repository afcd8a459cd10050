"""How large the answers of a kind of call have been (pure), so a heavy read
can be priced before it is sent instead of only after: a client with 100
units cannot then start fifteen 1 MiB reads at once and pay for them later,
and a heavy read is not raced on a second node (a hedge would double it).

A kind is the method, and for ``state_call`` its runtime API. Sizes are a
moving average of what nodes answered, kept only for kinds that answered more
than ``free_bytes`` at least once (the rest cost nothing extra anyway), in a
bounded table (least recently updated kinds go first).

The table outlives the process (``addon/quota/sizes_file.py``): a proxy that
restarts knows at once which kinds are heavy, so the first burst of 1 MiB
reads after a restart is priced, laned and kept from hedges like every later
one, instead of landing on the nodes all at once as light calls.
"""

from __future__ import annotations

from collections import OrderedDict

from addon.quota.costs import runtime_api
from addon.rpc.jsonrpc import Call

ALPHA = 0.3  # weight of the newest answer: follows a change in a few calls
MAX_KINDS = 1024


def kind(call: Call) -> str:
    api = runtime_api(call)
    return call.method if api is None else f"{call.method}:{api[:96]}"


class AnswerSizes:
    def __init__(self, max_kinds: int = MAX_KINDS) -> None:
        self._sizes: OrderedDict[str, float] = OrderedDict()
        self._max = max_kinds
        self.changes = 0  # learned answers that changed the table (a saver compares it)

    def __len__(self) -> int:
        return len(self._sizes)

    def expected(self, call: Call) -> int:
        """Bytes a call of this kind is expected to answer (0: small or unknown)."""
        if not self._sizes:
            return 0
        return int(self._sizes.get(kind(call), 0.0))

    def tracked(self, call: Call) -> bool:
        return bool(self._sizes) and kind(call) in self._sizes

    def learn(self, call: Call, nbytes: int, free_bytes: int) -> None:
        """One answer of ``nbytes``: tracked once it was over ``free_bytes``,
        and forgotten again when its average falls back under it."""
        k = kind(call)
        old = self._sizes.get(k)
        if old is None:
            if nbytes <= free_bytes:
                return
            new = float(nbytes)
        else:
            new = old + ALPHA * (nbytes - old)
            if new <= free_bytes:
                del self._sizes[k]
                self.changes += 1
                return
        self.changes += 1
        self._sizes[k] = new
        self._sizes.move_to_end(k)
        while len(self._sizes) > self._max:
            self._sizes.popitem(last=False)

    def snapshot(self) -> dict[str, float]:
        """The table, oldest entry first (what ``restore`` takes back)."""
        return dict(self._sizes)

    def restore(self, sizes: dict[str, float]) -> None:
        """Kinds learned before (a saved table); what this process learned since
        it started wins over them."""
        # the saved entries in their order, older than anything learned here
        table = OrderedDict((k, v) for k, v in sizes.items() if k not in self._sizes)
        table.update(self._sizes)
        self._sizes = table
        while len(self._sizes) > self._max:
            self._sizes.popitem(last=False)
