"""AppTest of the compiled engine mode (tiny model): chosen in the address and the sidebar, compiled before the
page measures, the same greedy tokens as eager shown on the timeline page, the kernel-level trace in both modes side
by side, one-line refusals with eager running, the race page racing compiled lanes and saying so."""
from tests.app.test_pages import errors, run_page, shown


def compiled_page(path: str, **query):
    """The page in compiled mode once its graph is compiled: the first visit answers eager while the graph compiles
    in the background (ui.frame.compiling), the next run is compiled."""
    from engine.core.background_compile import COMPILER
    from engine.core.loaded import ModelRef

    at = run_page(path, mode="compiled", **query)
    assert not errors(at), errors(at)
    COMPILER.wait_idle(ModelRef(query["model"], "", "compiled"), 900)
    at.run()
    return at


def _said(at) -> str:
    return " ".join(x.value for kind in (at.error, at.warning, at.info, at.success, at.caption, at.markdown)
                    for x in kind)


def test_timeline_in_compiled_mode_matches_eager_and_traces_both_modes():
    at = compiled_page("pages/timeline.py", model="tiny-random", max_new_tokens="6", temperature="0")
    assert not errors(at), errors(at)
    assert at.selectbox(key="w_mode").value == "compiled" and at.query_params["mode"] in ("compiled", ["compiled"])
    assert "wrote the same" in _said(at)  # section 1: the compiled run's tokens = eager's (float32)
    at.button(key="timeline_btn_kernels").click().run()
    assert not errors(at), errors(at)
    said = _said(at)
    assert "compiled mode, decode:" in said and "eager mode, decode:" in said and "Compiled, the decode step runs" in said
    assert "compiled mode, prefill (an eager pass):" in said  # compiled mode's prefill is not compiled: said so
    assert [h.value for h in at.subheader][-2:] == ["Eager", "Compiled"]
    table = next(d.value for d in at.dataframe if "regime" in d.value.columns)
    assert set(table["mode"]) == {"eager", "compiled"} and len(table) == 4
    decode = table[table["step"] == "decode"].set_index("mode")["matmul per layer"]  # per layer and kind
    assert decode["compiled"] < decode["eager"]  # fused: q/k/v one matrix multiply, gate/up another


def test_a_mode_the_model_cannot_run_is_refused_in_one_line_and_eager_runs():
    from streamlit.testing.v1 import AppTest

    from ui.frame import nav

    at = AppTest.from_file(str(nav.ROOT / "app.py"), default_timeout=240)
    for k, v in dict(model="tiny-random", mode="compiled", precision="int8", max_new_tokens="3").items():
        at.query_params[k] = v
    at.run()  # the first run refuses; the page after it runs eager
    assert not errors(at), errors(at)
    refusal = [e.value for e in at.error if "Compiled mode" in e.value]
    assert refusal and "int8" in refusal[0] and "Eager runs" in refusal[0] and "\n" not in refusal[0]
    at.run()
    assert at.selectbox(key="w_mode").value == "eager"
    assert "mode" not in at.query_params  # back at the default: the link no longer asks for compiled


def test_the_home_page_answer_in_compiled_mode_is_the_compiled_loop():
    at = compiled_page("pages/loop.py", model="tiny-random", max_new_tokens="5", temperature="0")
    assert not errors(at), errors(at)
    from engine.core.loaded import ModelRef
    from ui.frame.runs import kept

    tr = kept(at.session_state["settings"].run(ModelRef("tiny-random", "", "compiled")))
    # served by the class batcher, as in eager mode, its steps the compiled batch graph's (a batch of 1)
    assert tr is not None and tr.engine_mode == "compiled" and tr.timed_in_batcher
    assert all(s.compiled for s in tr.steps[1:])


def test_a_bad_mode_in_the_address_is_eager():
    at = run_page("pages/loop.py", model="tiny-random", mode="turbo", max_new_tokens="3")
    assert not errors(at), errors(at)
    assert at.selectbox(key="w_mode").value == "eager"


def test_the_race_page_races_compiled_and_says_how_each_lane_ran_in_compiled_mode():
    # a short prompt: the race fits the static cache of 256 positions, whose graphs the tiny model shares
    at = run_page("pages/speculative.py", model="tiny-random", timeout=600, mode="compiled", max_new_tokens="4",
                  race_prompt="story")
    assert not errors(at), errors(at)
    assert not any("this page runs eager" in c.value for c in at.caption)
    # the target drafts for itself: a race with drafts whatever the tiny model writes (lookup on a random model's
    # four tokens may draft nothing, and a race without drafts is shown as no race, without the lanes' modes)
    at.radio(key="speculative_drafter").set_value("model:self").run()
    at.button(key="speculative_go").click().run()
    assert not errors(at), errors(at)
    said = _said(at)
    assert ("plain lane's decode steps compiled (torch.compile graphs); speculative lane's verify passes compiled"
            in said), said[-2000:]
    # the "story" prompt is 340 tokens in the chat template: its 1,024-token bucket is longer than either lane's
    # static cache, and each lane says so (tests/engine/test_compiled_prefill.py runs a compiled bucket)
    why = "prefill: eager (its padded bucket does not fit the static cache)."
    assert f"Plain lane's {why}" in said and f"Speculative lane's {why}" in said, said[-2000:]
    # each graph's status box said what it compiles; compiled before the race, never inside its clocks
    assert all(s.label.startswith("Compiled: the ") for s in at.status), [s.label for s in at.status]


def test_the_compile_runs_in_the_background_while_the_page_answers_eager_and_cancel_stops_it():
    from streamlit.testing.v1 import AppTest

    from engine.core.background_compile import COMPILER, CompileState
    from engine.core.loaded import ModelRef
    from ui.frame import models, nav

    # a fresh compiled model and a cache length no other test compiles (1,024 positions: a long prompt + 256
    # tokens), so a real compile runs: dynamo would reuse a graph of the same shapes from another test here
    models._load_compiled.clear()
    at = AppTest.from_file(str(nav.ROOT / "app.py"), default_timeout=600)
    for k, v in dict(model="tiny-random", mode="compiled", max_new_tokens="256", temperature="0",
                     prompt="word " * 80).items():
        at.query_params[k] = v
    at.run()
    assert not errors(at), errors(at)
    ref = ModelRef("tiny-random", "", "compiled")
    job = next(j for j in COMPILER.jobs(ref) if j.active)  # still compiling: the page did not wait for it
    said = _said(at)
    assert "compiling the decode step, static cache of 1,024 positions in the background" in said, said[:2000]
    assert "answers eager meanwhile" in said
    from ui.frame.runs import kept

    tr = kept(at.session_state["settings"].run(ModelRef("tiny-random")))
    assert tr is not None and tr.engine_mode == "eager"  # the answer is there, eager, and says so
    at.button(key="compile_cancel").click().run()  # the box's button: the compile stops, the session runs eager
    assert not errors(at), errors(at)
    assert COMPILER.wait(job, 120) and job.state is CompileState.CANCELLED
    assert at.selectbox(key="w_mode").value == "eager"
    assert any("Compiling cancelled" in shown(e.value) for e in at.error)
