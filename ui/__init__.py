"""The UI: what pages share (frame) and one folder per topic. Every ui module logs to logging.getLogger(__name__),
through the one stderr handler attached here (engine.core.logs)."""
from engine.core import logs

logs.attach("ui")
