"""The saved-run blocks the pages draw: the two download buttons under a run (home page, race page), and the saved-
run page's upload, summary and "run it here" comparison. Display values from ui/record/view.py, figures from
ui/record/figures.py, texts from assets/lessons/record.md; the work itself in ui/record/runs.py."""
from __future__ import annotations

import streamlit as st

from engine.core.loaded import ModelLoadError
from engine.record.format import MAX_BYTES, RecordError
from ui.frame.html import chips, md_escape
from ui.frame import kept, uploads
from ui.frame.layout import chart
from ui.frame.lessons import lesson
from ui.record import runs, view
from ui.record.figures import logit_chart, timings_chart


def downloads(model: str, kind: str, make, key: str, record_too: bool = True) -> None:
    """'Save this run' (the JSON record) and 'Download as a page' (the self-contained replay): each file is built
    only when its button is clicked, and clicking reruns nothing."""
    c1, c2, c3 = st.columns([1, 1, 2], vertical_alignment="center")
    if record_too:
        c1.download_button("Save this run", data=lambda: runs.json_bytes(make),
                           file_name=runs.file_name(model, kind, "json"), mime="application/json", on_click="ignore",
                           key=f"{key}_json", icon=":material/save:",
                           help="One JSON file with everything to show and to check this run "
                                "(docs/record-format.md).")
    (c2 if record_too else c1).download_button("Download as a page", data=lambda: runs.page_bytes(make),
                       file_name=runs.file_name(model, kind, "html"), mime="text/html", on_click="ignore",
                       key=f"{key}_html", icon=":material/download:",
                       help="One HTML file that replays this run in any browser, with no server and no network.")
    c3.caption(lesson("record", "downloads" if record_too else "page only"))


def save_trace(trace) -> None:
    """The home page's run (the model that made it: the sidebar's, already loaded)."""
    from ui.frame.models import current_model

    lm = current_model()
    downloads(lm.name, "trace", lambda: runs.trace_record(trace, lm), "loop_save")


def save_race(result, params) -> None:
    """The race shown (``params``: the settings it ran with; its model is loaded already)."""
    from ui.frame.models import get_model

    lm = get_model(params.model)
    downloads(lm.name, "race", lambda: runs.race_record(result, params, lm), "speculative_save")


def upload() -> dict | None:
    """The uploader; a refused file is said in one line. Returns the checked record, or None.

    The file's bytes leave the server as soon as they are checked (ui/frame/uploads.py): this session keeps the
    checked record (or the refusal) under the file's id, and later runs of the page read that."""
    st.file_uploader("Open a saved run (RUN.json)", type=["json"], key="record_upload",
                     max_upload_size=MAX_BYTES // 2**20,
                     help="A file saved with 'Save this run' or `python -m engine trace/race --save`.")
    f = uploads.named("record_upload")
    if f is None:
        return None
    got = kept.get(("record upload", f.file_id))
    if got is None:
        for key, _ in kept.items("record upload"):  # one checked file per session: the one on show
            kept.forget(("record upload", *key))
        got = kept.put(("record upload", f.file_id), _checked(f))
    record, refusal = got
    if refusal is not None:
        st.error(md_escape(refusal), icon=":material/block:")
    return record


def _checked(f) -> tuple[dict | None, str | None]:
    """(the record, None) or (None, why it was refused); the file's bytes are dropped from the server either way."""
    if not hasattr(f, "getvalue"):  # Streamlit's DeletedFile: let go before this page read it, or read long ago
        return None, ("This file is no longer on the server (it keeps few uploads at once, and none once read): "
                      "open it again.")
    data = uploads.read_and_drop(f)
    if len(data) > MAX_BYTES:
        return None, f"This file is {len(data) / 2**20:,.1f} MB; a saved run is at most {MAX_BYTES // 2**20} MB."
    try:
        return runs.uploaded(data), None
    except RecordError as exc:
        return None, str(exc)


def summary(record: dict) -> None:
    """What the record says: its facts, its tokens, its measured timings, and its replay page."""
    st.dataframe(view.facts_table(record), hide_index=True)
    body = record[record["kind"]]
    where = md_escape(view.machine_line(record["machine"]))  # the record's own words: a caption is markdown
    st.markdown(lesson("record", "prompt"))
    st.code(body["prompt"]["text"], language=None, wrap_lines=True)
    if record["kind"] == "trace":
        from engine.record.build import steps_of
        from ui.frame.figures import step_times_bar

        st.markdown(lesson("record", "answer tokens"))
        st.html(chips(body["generated_tokens"], body["generated_ids"], highlight={0}))
        chart(step_times_bar(steps_of(body["steps"])), "recorded",
              f"Recorded on {where}, {view.when(record)}: wall time per forward pass incl. sampling, after a device "
              "sync.")
    else:
        from engine.record.speculative import spec_run
        from ui.frame.figures import progress_lines

        run = spec_run(body, record["model"]["name"])
        st.markdown(lesson("record", "race", shown=md_escape(view.wall_speedup(body["check"]["shown"], run.speedup)),
                           accepted=run.acceptance_rate, drafter=md_escape(run.drafter), k=run.k))
        chart(progress_lines(run), "recorded", f"Recorded on {where}, {view.when(record)}: tokens written against "
                                               "engine-measured time.")
    downloads(record["model"]["name"], record["kind"], lambda: record, "record_save", record_too=False)


def compare(record: dict) -> None:
    """Run the record again on this server (on request) and show it beside the record."""
    why_not = runs.availability(record)
    if why_not:
        st.info(md_escape(why_not) + " " + lesson("record", "replay anyway"), icon=":material/block:")
        return
    v = runs.verification(record)
    label = f"Run it here on {md_escape(record['model']['name'][:100])}" + (" (again)" if v is not None else "")
    if st.button(label, type="primary", icon=":material/replay:", key="record_run_here"):
        try:
            with st.spinner("Running the record again on this machine, alone on the engine..."):
                v = runs.run_here(record)
        except (ModelLoadError, ValueError) as exc:
            st.error(md_escape(f"{exc}") + " " + lesson("record", "replay anyway"), icon=":material/block:")
            return
    if v is None:
        st.caption(lesson("record", "press run"))
        return
    getattr(st, view.box(v))(md_escape(v.verdict), icon=":material/fact_check:")
    st.markdown(md_escape(view.tokens_line(v)))
    st.dataframe(view.side_by_side(record, v), hide_index=True)
    chart(timings_chart(v.timings, record["machine"]["device_name"]), "compared",
          f"Recorded there on {view.when(record)}; measured here just now, alone on this server's engine. "
          "Timings are measurements of each machine at that moment: they are set side by side, not verified.")
    if v.logits["per_step"]:
        same = max(v.logits["per_step"]) == 0
        chart(logit_chart(v.logits["per_step"], v.tolerance.logit), "model",
              ("0 at every step: the same logits, bit for bit. " if same else "") + "The recorded top-k logits of "
              f"each step against this machine's at the same token ids. Tolerance: {md_escape(v.tolerance.why)}.")
    with st.expander("Files compared by SHA-256"):
        st.dataframe(view.files_table(v), hide_index=True)
    for note in v.notes:
        st.caption(md_escape(note))
