"""A workaround of Streamlit internals: Streamlit's /_stcore/metrics closed to a class.

Streamlit serves /_stcore/metrics to anyone who can reach the server, without authentication: sessions connected
and their connects, cache hits and misses by function, cache memory by function. On a class server that is a live
activity feed of the room (when someone asked something, when a kept result was reused), and Streamlit 1.67 has no
setting that turns the endpoint off. The endpoint asks ``Runtime.instance().stats_mgr`` for its metric families on
every request and reports only those: on a class server (class mode, ui.frame.models.policy) ``closed_to_a_class``
makes that list empty, so the endpoint answers with no metrics. For one person the endpoint stays Streamlit's own.

It runs on every script run (app.py) and does its work once per process, at the server's first run; the stats
Streamlit keeps are not read by anything else. tests/app/test_class_server.py checks the endpoint of a real
class server; tests/ui/test_server_metrics.py fails the day Streamlit gains a setting for its metrics endpoint:
then use the setting and remove this module and its call in app.py.
"""
from __future__ import annotations

from ui.frame.models import policy

_CLOSED = "_ile_closed_to_a_class"  # set on Streamlit's stats manager once it reports nothing


def closed_to_a_class() -> None:
    """On a class server, Streamlit's metrics endpoint reports nothing from now on (once per process)."""
    if not policy().class_mode:
        return
    from streamlit.runtime import Runtime

    if not Runtime.exists():  # AppTest: no server, no endpoint
        return
    mgr = Runtime.instance().stats_mgr
    if getattr(mgr, _CLOSED, False):
        return
    mgr.registered_families = lambda: []
    mgr.get_stats = lambda family_names=None: {}
    setattr(mgr, _CLOSED, True)
