"""Guards for the library internals the app still relies on (docs/architecture.md, "Library internals relied on").
Each test fails the day the pinned library renames, removes or changes what we use: the import path, the
attribute, and the behaviour we count on, shown on a tiny case. Internals with their own test elsewhere:
Streamlit's PagesManager flag (tests/ui/test_legacy_pages.py), its metrics endpoint (tests/ui/test_server_metrics.py),
httpx2's pool backend (tests/engine/test_serving_hostile.py), the warm-up over Streamlit's stream
(tests/browser/test_warm_start.py, besides the message fields checked here)."""
import copy

import pytest
import torch
from streamlit.testing.v1 import AppTest


# ------------------------------------------------------------------------------------------------ Streamlit


def _run_context_script():
    import streamlit as st
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    ctx = get_script_run_ctx(suppress_warning=True)
    ctx.yield_check()  # nothing asked this run to stop: returns
    st.text(f"session {type(ctx.session_id).__name__}")


def test_a_run_has_a_context_with_a_session_and_a_yield_check():
    """ui/frame/work.py: a waiting run reads its session from the run context and lets Streamlit stop it
    through ``yield_check`` (that it does stop a closed tab's run: tests/browser/test_worker.py)."""
    from streamlit.runtime.scriptrunner_utils.script_run_context import ScriptRunContext, get_script_run_ctx

    assert callable(ScriptRunContext.yield_check) and get_script_run_ctx(suppress_warning=True) is None
    at = AppTest.from_function(_run_context_script).run(timeout=10)
    assert not at.exception and [t.value for t in at.text] == ["session str"]


def _unrecorded_script():
    import streamlit as st

    from ui.frame import work

    @st.cache_data
    def cached():
        st.text("recorded")
        with work._unrecorded() as ok:
            if ok:
                st.text("not recorded")
        return 1

    cached()


def test_a_line_drawn_unrecorded_inside_a_cached_function_is_not_replayed():
    """ui/frame/work.py clears Streamlit's ``in_cached_function`` while it draws the queue line, so a cached
    run that waited does not replay that line on its later hits (into blocks that may be gone)."""
    from contextvars import ContextVar

    from streamlit.runtime.caching.cached_message_replay import in_cached_function

    assert isinstance(in_cached_function, ContextVar)
    at = AppTest.from_function(_unrecorded_script)
    at.run(timeout=10)
    assert [t.value for t in at.text] == ["recorded", "not recorded"]
    at.run(timeout=10)  # a cache hit: only what was recorded is replayed
    assert not at.exception and [t.value for t in at.text] == ["recorded"]


def test_the_class_view_counts_the_runtimes_sessions(monkeypatch):
    """ui/batching/classroom.py: Streamlit has no public list of connected sessions; ``sessions_connected``
    asks the Runtime's session manager (``_session_mgr``), leaves the teacher's tabs out, and says None when it
    cannot."""
    from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
    from streamlit.runtime.memory_uploaded_file_manager import MemoryUploadedFileManager
    from streamlit.runtime.runtime import Runtime, RuntimeConfig
    from streamlit.runtime.websocket_session_manager import WebsocketSessionManager

    from types import SimpleNamespace

    import streamlit.runtime.scriptrunner as scriptrunner

    from ui.batching.classroom import sessions_connected
    from ui.frame.teacher import note_teacher_tab

    ids = ["student-1", "student-2", "teacher-tab"]

    class ThreeSessions(WebsocketSessionManager):
        def list_active_sessions(self):
            return [SimpleNamespace(session=SimpleNamespace(id=i)) for i in ids]

    assert sessions_connected() is None  # no server in this process
    monkeypatch.setattr(Runtime, "_instance", None)  # restored after the test: no Runtime leaks to other tests
    Runtime(RuntimeConfig(script_path="app.py", media_file_storage=MemoryMediaFileStorage("/media"),
                          uploaded_file_manager=MemoryUploadedFileManager("/upload"),
                          session_manager_class=ThreeSessions))
    assert sessions_connected() == 3
    # The class view's own tab is the teacher's, not a student's: it counted itself ("sessions connected" 1 in an
    # empty room).
    monkeypatch.setattr(scriptrunner, "get_script_run_ctx", lambda **_: SimpleNamespace(session_id="teacher-tab"))
    note_teacher_tab()
    assert sessions_connected() == 2
    ids.remove("teacher-tab")  # the teacher closed that tab: forgotten, and the students still count
    assert sessions_connected() == 2


def test_the_warm_up_messages_have_the_fields_it_sends_and_reads():
    """scripts/warm.py asks for a run with a BackMsg and waits for the ForwardMsg that says it finished."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    msg = BackMsg()
    msg.rerun_script.query_string = "a=1"
    msg.rerun_script.page_script_hash = ""
    assert BackMsg.FromString(msg.SerializeToString()).rerun_script.query_string == "a=1"
    assert "script_finished" in [f.name for f in ForwardMsg.DESCRIPTOR.oneofs_by_name["type"].fields]


# --------------------------------------------------------------------------------------------- transformers


def _tiny(config_class, **kw):
    return config_class(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                        num_attention_heads=2, num_key_value_heads=1, **kw)


def test_the_attention_implementation_is_read_from_the_config():
    """engine/core/instrument.py and archfacts.py read ``config._attn_implementation`` (no public getter); the
    public setter writes it."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    model = AutoModelForCausalLM.from_config(_tiny(LlamaConfig), attn_implementation="sdpa")
    assert model.config._attn_implementation == "sdpa"
    model.set_attn_implementation("eager")
    assert model.config._attn_implementation == "eager"


def test_families_with_their_own_attention_say_so():
    """engine/core/loaded.py gives eager attention to a class whose ``_supports_attention_backend`` is False. The
    flag must be declared (the loader's getattr default would otherwise answer for every family)."""
    from transformers import FalconForCausalLM, LlamaForCausalLM

    assert FalconForCausalLM._supports_attention_backend is False
    assert LlamaForCausalLM._supports_attention_backend is True


def test_each_layers_kind_and_window_come_from_the_config():
    """engine/core/archfacts.py reads each layer's kind and window with ``get_layer_types_and_kwargs`` (a change
    would make every layer global, silently: archfacts falls back to that for configs without the facts)."""
    from transformers import Gemma3TextConfig, MistralConfig
    from transformers.cache_utils import get_layer_types_and_kwargs

    assert get_layer_types_and_kwargs(_tiny(MistralConfig, sliding_window=4)) == (
        ["sliding_attention"] * 2, [{"sliding_window": 4}] * 2)
    types, kwargs = get_layer_types_and_kwargs(_tiny(
        Gemma3TextConfig, sliding_window=4, layer_types=["sliding_attention", "full_attention"]))
    assert list(types) == ["sliding_attention", "full_attention"] and kwargs[0]["sliding_window"] == 4
    assert types[1] == "full_attention" and not kwargs[1].get("sliding_window")


def test_the_dynamic_cache_layer_fields_the_engine_reads():
    """engine/core/loop.py (rolling back past a window), kv.py (bytes from the tensors), jobs/classbatch.py and
    batching/experiment.py (a cache rebuilt from selected rows with ``ddp_cache_data``) read these layer fields."""
    from transformers import DynamicCache, LlamaConfig, MistralConfig

    cfg, plain_cfg = _tiny(MistralConfig, sliding_window=4), _tiny(LlamaConfig)
    cache = DynamicCache(config=cfg)
    cache.activate_past_recording()
    k = torch.randn(2, 1, 6, 8)  # [batch, kv_heads, tokens, head_dim]: past the window of 4
    for i in range(2):
        cache.update(k, k + 1, i)
    layer = cache.layers[0]
    assert (layer.is_sliding, layer.sliding_window, layer.record_past) == (True, 4, True)
    assert cache.is_recording_past(0) and cache.get_seq_length() == layer.get_seq_length() == 6
    assert layer.keys.shape[-2] == 6 and torch.equal(layer.values, k + 1)  # the past kept until a crop
    layer.crop(-2)
    assert layer.get_seq_length() == 4 and layer.keys.shape[-2] <= 4
    plain = DynamicCache(config=plain_cfg)
    for i in range(2):
        plain.update(k, k + 1, i)
    rows = DynamicCache(ddp_cache_data=[(l.keys[[1]], l.values[[1]]) for l in plain.layers], config=plain_cfg)
    assert rows.get_seq_length() == 6 and torch.equal(rows.layers[1].values, k[[1]] + 1)


# ----------------------------------------------------------------------------------------------------- torch


def test_a_shallow_module_copy_with_its_own_child_table_leaves_the_original_alone():
    """engine/speculative/drafters.py builds the early-exit view from shallow copies that get a child table of
    their own (``_modules``, nn.Module's table of children); a child set on the copy is not the original's."""
    from engine.speculative import drafters

    original = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    first = original[0]
    view = drafters._shallow(original)
    setattr(view, "0", torch.nn.Identity())
    assert original[0] is first and isinstance(view[0], torch.nn.Identity) and view[1] is original[1]
    assert isinstance(copy.copy(original)._modules, dict)


def test_a_dispatch_mode_sees_every_tensor_a_pass_creates():
    """engine/timeline/memory.py counts the bytes of a pass's tensors with a TorchDispatchMode."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = {}

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            seen[func.overloadpacket.__name__] = tuple(out.shape)
            return out

    x = torch.ones(3, 4)
    with Ops():
        (x @ x.T).relu()
    assert seen["mm"] == seen["relu"] == (3, 3)


def test_the_compiled_mode_can_raise_dynamos_recompile_limit():
    """engine/core/compiled.py raises ``torch._dynamo.config.recompile_limit`` to keep one compiled entry per
    (model, precision, cache length)."""
    import torch._dynamo

    before = torch._dynamo.config.recompile_limit
    assert isinstance(before, int)
    with torch._dynamo.config.patch(recompile_limit=before + 1):
        assert torch._dynamo.config.recompile_limit == before + 1
    with pytest.raises(AttributeError):
        torch._dynamo.config.no_such_limit  # noqa: B018 - the config refuses a name it does not have


def test_the_page_dump_walks_apptests_whole_tree():
    """scripts/page_dump.py (a dev tool comparing every page before and after a refactor) walks AppTest's ``_tree``:
    the main area, the sidebar and the event block (toasts) that the public ``main`` / ``sidebar`` leave out."""
    at = AppTest.from_string("import streamlit as st\nst.text('a')\nst.sidebar.text('b')").run(timeout=10)
    blocks = list(at._tree.children.values())
    assert [b.type for b in blocks] == ["main", "sidebar", "event"] and blocks[0] is at.main
