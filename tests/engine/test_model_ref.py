"""A model's identity is a frozen reference (engine.core.loaded.ModelRef: name, precision, engine mode), never a
string taken apart: no module of the app or the engine splits or joins a model name on "@", except the one function
where text from a person or a link becomes a name (engine.models.names.plain_name). And a reference is a plain value
for every cache that keys on it: st.cache_data, the worker's job keys."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine.core.loaded import ModelRef
from engine.models.names import plain_name

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
CODE = ["app.py", "pages", "engine", "ui", "scripts"]
PARSER = ROOT / "engine" / "models" / "names.py"  # plain_name: the one place a typed name loses its "@" suffixes
SPLITS = ("split", "rsplit", "partition", "rpartition")


def scan_tree(find, skip=()) -> list[str]:
    """``path:line`` for every line ``find(source)`` returns in the app's, the engine's and the scripts' Python files
    (``skip``: files a rule exempts)."""
    found = []
    for r in CODE:
        p = ROOT / r
        for path in ([p] if p.is_file() else sorted(p.rglob("*.py"))):
            if path not in skip:
                found += [f"{path.relative_to(ROOT)}:{n}" for n in find(path.read_text())]
    return found


def at_sign_surgery(source: str) -> list[int]:
    """Lines that take a string apart or build one on "@": ``x.split("@")`` (also rsplit / partition /
    rpartition, with the "@" given directly or through a module constant), ``"@".join(...)``, an f-string with
    "@" between two values (``f"{name}@{precision}"``, ``f"{name}{SEP}{precision}"``), ``a + "@" + b``, and a
    module constant that is "@". Text escaped for display (``s.replace("@", WJ + "@")``) takes no name apart."""
    tree = ast.parse(source)
    consts = {t.id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
              and n.value.value == "@" for t in n.targets if isinstance(t, ast.Name)}

    def is_at(node) -> bool:
        return (isinstance(node, ast.Constant) and node.value == "@") or \
            (isinstance(node, ast.Name) and node.id in consts)

    shown = {id(sub) for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "replace" for a in n.args for sub in ast.walk(a)}  # text escaped for display
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value == "@":
            lines.add(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in SPLITS and node.args and is_at(node.args[0]):
                lines.add(node.lineno)
            elif node.func.attr == "join" and is_at(node.func.value):
                lines.add(node.lineno)
        elif isinstance(node, ast.JoinedStr):
            parts = node.values
            if any(isinstance(v, ast.FormattedValue) and is_at(v.value) for v in parts):
                lines.add(node.lineno)
            for i in range(1, len(parts) - 1):
                if isinstance(parts[i], ast.Constant) and "@" in str(parts[i].value) and \
                        isinstance(parts[i - 1], ast.FormattedValue) and isinstance(parts[i + 1], ast.FormattedValue):
                    lines.add(node.lineno)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and id(node) not in shown and \
                (is_at(node.left) or is_at(node.right)):
            lines.add(node.lineno)
    return sorted(lines)


def test_the_scan_finds_planted_surgery():
    planted = ('SEP = "@"\n'
               'a = name.split("@")[0]\n'
               'b = key.rpartition(SEP)\n'
               'c = f"{name}@{precision}"\n'
               'h = f"{name}{SEP}{precision}"\n'
               'd = "@".join([name, precision])\n'
               'e = name + "@" + precision\n'
               'f = text.replace("@", WJ + "@")\n'     # escaping for display: not a model name taken apart
               'g = f"write to {who}@example.org"\n')  # one value, then text: not a join of two values
    assert at_sign_surgery(planted) == [1, 2, 3, 4, 5, 6, 7]


def test_no_model_name_is_split_or_joined_on_at_outside_plain_name():
    found = scan_tree(at_sign_surgery, skip=(PARSER,))
    assert not found, f"a model is a ModelRef, not a string taken apart on '@' (use plain_name for typed text): {found}"


def test_plain_name_drops_only_known_suffixes():
    assert plain_name("embedded@int8") == "embedded"
    assert plain_name("embedded@int8@compiled") == plain_name("embedded@compiled") == "embedded"
    assert plain_name("embedded@float32@int8") == "embedded"
    assert plain_name("someone/model@v2") == "someone/model@v2" and plain_name("a@b") == "a@b"
    assert plain_name("") == ""


def test_a_reference_is_a_value():
    a = ModelRef("embedded", "int8")
    assert a == ModelRef("embedded", "int8") and hash(a) == hash(ModelRef("embedded", "int8"))
    assert a != ModelRef("embedded") and a != a.at(mode="compiled") and a.at("") == ModelRef("embedded")
    with pytest.raises(AttributeError):
        a.name = "other"  # frozen: a key must not change under the cache that holds it
    assert a.label() == "embedded (int8)" and ModelRef("embedded").label() == "embedded"


def test_streamlit_hashes_a_reference_by_its_fields():
    """st.cache_data keys a cached run on its arguments: two equal references must hit one entry, and references
    that differ in any field must not."""
    from streamlit.runtime.caching.hashing import update_hash
    from streamlit.runtime.caching.cache_type import CacheType
    import hashlib

    def key(v) -> str:
        h = hashlib.new("md5")
        update_hash(v, h, CacheType.DATA)
        return h.hexdigest()

    base = ModelRef("embedded")
    assert key(base) == key(ModelRef("embedded", "", "eager"))
    assert len({key(base), key(base.at("int8")), key(base.at(mode="compiled")), key(ModelRef("gemma3-270m"))}) == 4


def test_the_worker_keys_a_model_by_its_reference(tiny_lm):
    from engine.core.compiled import to_mode
    from engine.models.precision import to_precision
    from ui.frame.work import job_key

    def fn(lm, n):
        return n

    copy = to_precision(tiny_lm, "bfloat16")
    assert copy.name == tiny_lm.name  # the name for people is the same at every precision...
    assert job_key(fn, (copy, 1), {}) != job_key(fn, (tiny_lm, 1), {})  # ...the job is not
    eager_again = to_mode(tiny_lm, "eager")
    assert job_key(fn, (eager_again, 1), {}) == job_key(fn, (tiny_lm, 1), {})


# ------------------------------------------------------------------------------------------ one identity, no patches

IDENTITY = ("name", "precision", "mode")


def identity_patches(source: str) -> list[int]:
    """Lines that change a loaded model's identity after it was made: an assignment to ``x.ref`` or ``x.info``,
    ``setattr(x, "ref" | "info", ...)``, or a copy of a model's facts that sets a name, precision or mode
    (``replace(x.info, name=...)``)."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        if any(isinstance(t, ast.Attribute) and t.attr in ("ref", "info") for t in targets):
            lines.add(node.lineno)
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "setattr" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and \
                    node.args[1].value in ("ref", "info"):
                lines.add(node.lineno)
            if name == "replace" and node.args and isinstance(node.args[0], ast.Attribute) and \
                    node.args[0].attr == "info" and any(k.arg in IDENTITY for k in node.keywords):
                lines.add(node.lineno)
    return sorted(lines)


PLANTED_PATCHES = """\
lm.info = replace(lm.info, source="x")
lm.ref = ModelRef(name)
info = replace(lm.info, name=name)
setattr(lm, "ref", r)
copy = replace(lm.info, dtype=dtype)
ref = lm.ref
"""


def test_the_patch_scan_finds_planted_patches():
    """The first four lines patch a loaded model's identity; a copy's own facts (a precision's dtype) and reading
    its reference do not."""
    assert identity_patches(PLANTED_PATCHES) == [1, 2, 3, 4]


def test_nothing_patches_a_loaded_models_identity():
    """ModelInfo holds facts only; who the model is (name, precision, mode) is its ModelRef, set when it is made."""
    from dataclasses import fields

    from engine.core.loaded import ModelInfo

    assert not {f.name for f in fields(ModelInfo)} & set(IDENTITY), "ModelInfo repeats the model's identity"
    found = scan_tree(identity_patches)
    assert not found, f"a loaded model's identity is patched after it was made: {found}"


def test_a_label_is_the_models_name_and_hides_where_it_lives(tiny_lm):
    """A class server's label (ILE_MODELS="tiny=tiny-random") loads what it names, in one call; the model is known by
    the label, with its precision and mode, and its source never shows the folder or id behind it."""
    from engine.models.loading import load_model

    lm = load_model(ModelRef("tiny", "bfloat16", path="tiny-random"), device="cpu")
    assert lm.ref == ModelRef("tiny", "bfloat16") and lm.name == "tiny" and lm.ref.path == "tiny-random"
    assert lm.info.source == "tiny (offered by this server)" and "tiny-random" not in repr(lm.ref)
    assert lm.info.n_params == tiny_lm.info.n_params and lm.info.dtype == "bfloat16"
