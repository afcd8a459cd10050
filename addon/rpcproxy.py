"""mitmproxy entry script: ``mitmdump -s addon/rpcproxy.py --mode reverse:… \
--set chainproxy_config=configs/finney.yaml``.

Kept to one import so mitmproxy's hot reload of this file is cheap; the logic
lives in the installed ``addon`` package
(docs/DESIGN-NOTES.md#mitmproxy-facts-it-rests-on).
"""

from addon.addons import build_addons

addons = build_addons()
