"""Where the parts of a causal LM live, found on the loaded model (known attribute paths first, then the\nModuleList of the config's layer count), and the unembedding the logit lens uses."""
from __future__ import annotations


import torch


_BODY_ATTRS = ("model", "transformer", "gpt_neox", "decoder")
_BLOCK_ATTRS = ("layers", "h", "blocks")
_FINAL_NORM_ATTRS = ("norm", "ln_f", "final_layer_norm", "final_layernorm", "norm_f")


def text_config(model):
    cfg = model.config
    try:
        return cfg.get_text_config(decoder=True)
    except (AttributeError, TypeError):
        return cfg


def n_layers_config(model) -> int | None:
    cfg = text_config(model)
    for key in ("num_hidden_layers", "n_layer", "num_layers", "n_layers"):
        v = getattr(cfg, key, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def find_blocks(model) -> tuple[torch.nn.Module, torch.nn.ModuleList]:
    """(the module that holds the blocks, the blocks): the known attribute paths first (model.layers,
    transformer.h, gpt_neox.layers, model.decoder.layers, transformer.blocks), else the shallowest ModuleList
    whose length is the config's layer count."""
    node = model
    for _ in range(3):
        for attr in _BLOCK_ATTRS:
            b = getattr(node, attr, None)
            if isinstance(b, torch.nn.ModuleList) and len(b):
                return node, b
        nxt = next((getattr(node, a) for a in _BODY_ATTRS if isinstance(getattr(node, a, None), torch.nn.Module)),
                   None)
        if nxt is None:
            break
        node = nxt
    want = n_layers_config(model)
    for name, mod in sorted(model.named_modules(), key=lambda nm: nm[0].count(".")):
        if isinstance(mod, torch.nn.ModuleList) and len(mod) and (want is None or len(mod) == want) and name:
            parent = model.get_submodule(name.rpartition(".")[0]) if "." in name else model
            return parent, mod
    raise ValueError(f"no transformer blocks found in {type(model).__name__}")


def body(model) -> torch.nn.Module:
    """The module holding the blocks, the embeddings and the final norm (model.model, model.transformer,
    model.gpt_neox, OPT's model.decoder, ...)."""
    return find_blocks(model)[0]


def blocks(model) -> torch.nn.ModuleList:
    return find_blocks(model)[1]


def final_norm(model) -> torch.nn.Module:
    b = body(model)
    for attr in _FINAL_NORM_ATTRS:
        mod = getattr(b, attr, None)
        if isinstance(mod, torch.nn.Module):
            return mod
    raise ValueError(f"no final norm found in {type(model).__name__}")


def logit_softcap(model) -> float | None:
    v = getattr(text_config(model), "final_logit_softcapping", None)
    return float(v) if v else None


def unembed(model, hidden: torch.Tensor) -> torch.Tensor:
    """Residual-stream vectors -> vocabulary logits: final norm, then the output head."""
    logits = model.get_output_embeddings()(final_norm(model)(hidden))
    cap = logit_softcap(model)
    return torch.tanh(logits / cap) * cap if cap else logits


def block_output(out) -> torch.Tensor:
    return out[0] if isinstance(out, tuple) else out


def block_input(args, kwargs) -> torch.Tensor:
    """The residual stream a block receives: its first positional argument or ``hidden_states``."""
    return args[0] if args else kwargs["hidden_states"]
