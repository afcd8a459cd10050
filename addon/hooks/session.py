"""The one pooled HTTP session for upstream calls and the sidecar: opened when
mitmproxy runs (a config reload hands it on, see ``Runtime.reload``), closed
when the addon is unloaded."""

from __future__ import annotations

from mitmproxy.utils.asyncio_utils import create_task

from addon.hooks.holder import RuntimeHolder
from addon.upstream.forward import new_session
from addon.upstream.hedge import cancel_outraced


class HttpSession:
    def __init__(self, holder: RuntimeHolder) -> None:
        self.holder = holder

    def running(self) -> None:
        rt = self.holder.runtime
        if rt is not None and rt.session is None:
            rt.attach_session(new_session())

    def done(self) -> None:
        # Synchronous (mitmproxy's hot reload calls it so): the close is scheduled,
        # in a task mitmproxy keeps a reference to until it ends.
        rt = self.holder.runtime
        if rt is not None:
            rt.head_watch.close()  # its timers; its subscriptions end with the hub's
            rt.subs.stop()  # its sockets end with the session: no resubscribing now
            cancel_outraced()  # hedge losers still running: nobody reads their answers
            if rt.access_log is not None:
                rt.access_log.close()  # what is queued is written (bounded)
        session = rt.detach_session() if rt is not None else None
        if session is None:
            return
        try:
            create_task(session.close(), name="chainproxy: close HTTP session", keep_ref=True)
        except RuntimeError:
            session.close().close()  # no loop left: the process is exiting anyway
