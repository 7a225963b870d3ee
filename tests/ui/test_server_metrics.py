"""ui/frame/server_metrics.py closes Streamlit's /_stcore/metrics on a class server by emptying what its stats
manager reports, because Streamlit has no setting for the endpoint. This test fails the day it has one (a new
option about metrics), or the day the manager's methods the workaround replaces are gone: then use the setting
and remove the module and its call in app.py."""
from streamlit import config
from streamlit.runtime.stats import StatsManager

KNOWN = {"server.unsafeMetricsUserAttributes"}  # labels for per-user metrics: it cannot turn the endpoint off


def test_streamlit_still_has_no_setting_for_its_metrics_endpoint():
    metric_options = {name for name in config.get_config_options()
                      if "metric" in name.lower() and not name.startswith("theme.")}  # st.metric's look
    assert metric_options == KNOWN, (
        f"Streamlit has new metrics settings {sorted(metric_options - KNOWN)}: if one closes /_stcore/metrics, "
        "use it and remove ui/frame/server_metrics.py")


def test_the_stats_manager_still_has_what_the_workaround_replaces():
    assert callable(getattr(StatsManager, "registered_families", None)) and callable(StatsManager.get_stats)
