"""ui/frame/kept.py is the session's one bounded store of results kept after a button: every page's (races,
sweeps, serving measurements, precision comparisons, measured results) share its bound, the least recently used
goes first, and ``items(name)`` lists one page's."""
import ast
from pathlib import Path

from ui.frame import kept

ROOT = Path(__file__).resolve().parents[2]


def test_one_bound_for_every_page_and_the_least_recently_used_goes_first():
    for key in [k for k, _ in kept.items("serving")] + [k for k, _ in kept.items("measured")]:
        kept.forget(key)
    for i in range(kept.MAX_KEPT + 5):
        kept.put(("serving", i), i)
        if i == 0:
            kept.put(("measured", "a"), "m")
    assert kept.get(("measured", "a")) is None  # dropped: the bound is shared by every page
    assert kept.get(("serving", 0)) is None and kept.get(("serving", kept.MAX_KEPT + 4)) == kept.MAX_KEPT + 4
    kept.get(("serving", 5))  # a read counts as a use
    kept.put(("measured", "b"), "m")
    assert kept.get(("serving", 5)) == 5 and kept.get(("serving", 6)) is None
    assert [k for k, _ in kept.items("measured")] == [("b",)]


def test_no_other_module_keeps_results_in_session_state_by_itself():
    """The stores that kept.py replaced are gone (a dict, OrderedDict, set or list of results put in st.session_state:
    unbounded per session)."""
    offenders = []
    for p in sorted((ROOT / "ui").rglob("*.py")):
        if p.relative_to(ROOT).as_posix() in ("ui/frame/kept.py", "ui/frame/state.py"):  # state: URL values
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "setdefault"
                    and "session_state" in ast.unparse(node.func) and len(node.args) == 2
                    and ast.unparse(node.args[1]) in ("{}", "OrderedDict()", "dict()", "set()", "[]", "list()")):
                offenders.append(f"{p.relative_to(ROOT)}: {ast.unparse(node)}")
    assert offenders == [], offenders
