"""What a server is and offers, asked once when the page connects: its models, its /metrics, its logprobs."""
from __future__ import annotations

from dataclasses import dataclass

from engine.serving import client as C
from engine.serving import config as K
from engine.serving import errors as E
from engine.serving import fence as F
from engine.serving import metrics as M

OWNERS = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp server", "me": "llama-cpp-python",
          "tgi": "TGI", "text-generation-inference": "TGI"}


@dataclass(frozen=True)
class ServerInfo:
    base_url: str
    models: tuple[str, ...]
    model: str  # the model the requests will name ('' = the server's default)
    model_listed: bool
    engine: str | None  # a guess from /v1/models owned_by and the /metrics names
    offer: M.Offer
    notes: tuple[str, ...]

    def to_dict(self) -> dict:
        slots = self.offer.slots.__dict__ if self.offer.slots else None
        return {"base_url": self.base_url, "models": list(self.models), "model": self.model,
                "model_listed": self.model_listed, "engine": self.engine,
                "offer": {**self.offer.__dict__, "slots": slots}, "notes": list(self.notes)}


def probe(cfg: K.ServerConfig, cancel=None) -> ServerInfo:
    """GET /v1/models and /metrics. Raises ServingError if the server cannot be reached or is not OpenAI-like."""
    with F.make_client(cfg, 2, cancel=cancel) as cl:
        models = C.list_models(cfg, cl)
        try:
            met = M.fetch(cfg, cl)
            met_note = None
        except E.RequestCancelled:
            raise
        except E.ServingError as exc:
            met, met_note = None, f"/metrics could not be read: {exc}"
        slots = None
        if met is None or met.get(M.KV_USAGE) is None:  # llama.cpp: KV use is on /slots, not in /metrics
            try:
                slots = M.fetch_slots(cfg, cl)
            except E.RequestCancelled:
                raise
            except E.ServingError:
                slots = None
    ids = tuple(m["id"] for m in models)
    owners = {str(m.get("owned_by", "")).lower() for m in models}
    engine = (next((OWNERS[o] for o in owners if o in OWNERS), None) or (met.engine if met else None)
              or ("llama.cpp server" if slots else None))
    notes = []
    listed = not cfg.model or cfg.model in ids
    if not ids:
        notes.append("The server lists no models.")
    elif not cfg.model:
        notes.append(f"No model name given: requests go to the server's default ({ids[0]}).")
    elif not listed:
        notes.append(f"'{cfg.model}' is not among the server's models ({', '.join(ids[:5])}). vLLM, SGLang and TGI "
                     "answer such a request with 404; llama-cpp-python quietly uses its default model.")
    if met_note:
        notes.append(met_note)
    elif met is None and slots is None:
        notes.append("This server has no /metrics endpoint (404): KV-cache usage and speculative-decoding counters "
                     "cannot be read from it.")
    elif met is None:
        notes.append("This server has no /metrics endpoint (llama-server starts it with --metrics): KV use is read "
                     "from /slots, but running/waiting requests and speculative counters are missing.")
    if met is not None and met.get(M.KV_USAGE) is None and slots is None:
        notes.append("Its /metrics has no KV-cache gauge and it has no /slots (llama-server: --slots), so KV-cache "
                     "use is missing.")
    return ServerInfo(cfg.label or cfg.base_url, ids, cfg.model, listed, engine, M.offer(met, slots), tuple(notes))
