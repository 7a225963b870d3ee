"""Which serving engines the serving page may talk to.

Open mode (one person on their own machine): any http(s) address the person types; they could fetch it with
curl themselves. Class mode (engine.models.names: a teacher serving the app to a room): only the servers the
teacher listed when starting the app, chosen by label; the address behind a label is never sent to a browser,
never put in a link and never named in a message, and the client is fenced to that host and port (a redirect or
any other target is refused before a socket opens). Without a list, a class server offers no serving engine.

``ILE_SERVERS``: comma-separated ``label=http://host:port`` entries (a path prefix is allowed, e.g.
``gpu=https://gpu.lan/vllm``); a bare address gets the label "server 1", "server 2", ...
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Mapping

import engine.settings as settings
from engine.models.names import clean_name, class_mode_from_env, match_key
from engine.serving import config as K
from engine.serving import errors as E

logger = logging.getLogger(__name__)

MAX_LABEL = 60


class ServerNotListed(E.BadURL):
    kind = "not listed"


def parse_servers(text: str) -> tuple[tuple[str, str], ...]:
    """``"gpu=http://10.0.0.5:8000, cpu=http://127.0.0.1:8080"`` -> (("gpu", "http://10.0.0.5:8000"), ...).
    Entries whose address is not a valid http(s) base URL are dropped (the log says which label), as are
    repeated labels (in any spelling)."""
    out, seen = [], set()
    for n, item in enumerate((text or "").split(","), 1):
        label, eq, url = item.partition("=")
        if not eq:
            label, url = f"server {len(out) + 1}", label
        label = clean_name(label)[:MAX_LABEL]
        if not url.strip():
            continue
        try:
            base = K.normalize_base_url(url.strip())
        except E.BadURL:
            logger.info(f"{settings.SERVERS.name}: entry {n} ('{label}') is not an http(s) address; left out")
            continue
        if not label or match_key(label) in seen:
            continue
        seen.add(match_key(label))
        out.append((label, base))
    return tuple(out)


@dataclass(frozen=True)
class ServerPolicy:
    class_mode: bool = False
    servers: tuple[tuple[str, str], ...] = ()  # (label shown, base URL never shown) in class mode

    @property
    def labels(self) -> list[str]:
        return [label for label, _ in self.servers]

    def config(self, where: str, model: str = "", api_key: str = "", api: str = "completions",
               **timeouts) -> K.ServerConfig:
        """The config for ``where``: in open mode an address (any http(s) one); in class mode a listed label,
        else ServerNotListed (which names the listed labels only, and nothing is sent anywhere)."""
        if not self.class_mode:
            return K.ServerConfig(where, model, api_key, api=api, **timeouts)
        key = match_key(where or "")
        for label, base in self.servers:
            if match_key(label) == key:
                return K.ServerConfig(base, model, api_key, api=api, label=label, fenced=True, **timeouts)
        if not self.servers:
            raise ServerNotListed("This class server lists no serving engines (the teacher can name them in "
                                  f"{settings.SERVERS.name} when starting the app).")
        raise ServerNotListed("This class server connects only to the serving engines it lists: "
                              + ", ".join(self.labels) + ". Choose one of them.")


def server_policy_from_env(environ: Mapping[str, str] | None = None, server_address: str | None = "127.0.0.1"
                           ) -> ServerPolicy:
    return ServerPolicy(class_mode_from_env(environ, server_address), parse_servers(settings.SERVERS.get(environ)))
