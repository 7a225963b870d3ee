"""The serving page's sections, each drawn whole (the page only lays them out in order). Every number is measured
on the server the person connects to; nothing runs until a button is pressed."""
from __future__ import annotations

import streamlit as st

from engine.serving import config as K
from engine.serving import errors as E
from engine.serving import concurrency as Co
from engine.serving import measure as Me
from engine.serving import metrics as M
from ui.frame import nav
from ui.serving import runs
from ui.frame.layout import chart
from ui.frame.lessons import lesson
from ui.serving.figures import (concurrency_chart, concurrency_gantt, itl_chart, kv_usage_chart, next_token_bars,
                                prompt_sweep_chart, request_timeline, spec_live_chart, spec_per_position_chart)
from ui.frame.html import md_escape
from ui.serving.view import (concurrency_table, names_table, offers_table, server_rows, spec_text, timeline_rows)


def connect():
    """The connection form and what the server offers; stops the page until a server answers. In class mode the
    form offers the teacher's listed servers by label (no address field: nothing else can be reached)."""
    conn = runs.connection()
    pol = runs.policy()
    if pol.class_mode and not pol.labels:
        st.info("This class server lists no serving engines, so this page cannot connect to one. (The teacher "
                "can name them with ILE_SERVERS when starting the app.) The other pages work as usual.",
                icon=":material/lan:")
        st.stop()
    with st.form("serving_connect", border=True):
        c = st.columns([3, 2, 2])
        if pol.class_mode:
            idx = pol.labels.index(conn["server"]) if conn["server"] in pol.labels else 0
            server = c[0].selectbox("Server", pol.labels, index=idx, key="serving_server",
                                    help="The serving engines this class server offers (chosen by the teacher).")
        else:
            server = c[0].text_input("Base URL", conn["server"], max_chars=500, key="serving_url",
                                     help="The server's root, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine).")
        model = c[1].text_input("Model name", conn["model"], max_chars=300,
                                help="As the server lists it under /v1/models; empty = the server's default.", key="serving_model")
        key = c[2].text_input("API key (optional)", conn["api_key"], type="password", max_chars=500,
                              help="Kept in this browser session only: never put in the page address or a shared link.",
                              key="serving_key")
        api = st.radio("API", ["completions", "chat"], index=["completions", "chat"].index(conn["api"]), horizontal=True,
                       help="/v1/completions sends the prompt as raw text (default); /v1/chat/completions wraps it in "
                            "the model's chat template on the server.", key="serving_api")
        connect = st.form_submit_button("Connect", type="primary", icon=":material/lan:")
    if connect:
        conn.update(server=(server or "").strip(), model=model.strip(), api_key=key, api=api)
    runs.share(conn)
    try:
        cfg = runs.config(conn)
    except E.ServingError as exc:
        st.error(md_escape(exc), icon=":material/error:")
        st.stop()
    info = runs.connect(cfg) if connect else runs.stored(cfg, "probe")
    if info is None:
        st.info(lesson("serving", "press connect"), icon=":material/lan:")
        st.stop()
    if isinstance(info, E.ServingError):
        st.error(f"**{md_escape(info.kind.capitalize())}.** {md_escape(info)}", icon=":material/error:")
        st.caption("The rest of the app does not depend on this server: the other pages keep working.")
        st.stop()
    st.success(f"Connected to **{md_escape(info.engine or 'an OpenAI-compatible server')}** at {md_escape(cfg.where)}, "
               f"serving {md_escape(', '.join(info.models) or 'no listed model')}.", icon=":material/check_circle:")
    for note in info.notes:
        st.warning(md_escape(note), icon=":material/info:")
    nt_any = next((v for k, v in runs.results().items() if k[1] == "next" and k[0][0] == cfg.base_url), None)
    lp = ("yes" if isinstance(nt_any, Me.NextToken) else "no: " + nt_any.kind if isinstance(nt_any, E.ServingError)
          else "not asked yet")
    tok = next((v.token_source for k, v in runs.results().items()
                if k[1] == "single" and isinstance(v, Me.RequestTimeline)), "not measured yet")
    st.dataframe(offers_table(info, lp, tok), hide_index=True, width="stretch")
    st.caption("What the server offers, read from /v1/models, /metrics and (llama.cpp) /slots; log-probabilities "
               "and token counts are known once a request has asked for them. A quantity the server does not "
               "export is said to be missing, never drawn as 0.")
    with st.expander("Metric names per engine and version (which were checked against a real server)"):
        st.dataframe(names_table(), hide_index=True)
        st.caption("The llama.cpp row is checked against a real llama-server in this project's tests; the other "
                   "rows are read from each engine's documentation.")
    return cfg, info


def one_request(cfg) -> None:
    c = st.columns([3, 1])
    prompt = c[0].text_area("Prompt", "Explain in two sentences why the sky is blue.", max_chars=20_000, height=80,
                            key="serving_prompt")
    new_tokens = c[1].slider("New tokens", 4, 128, 32, key="serving_new_tokens")
    if st.button("Send one request", icon=":material/send:", key="serving_send") and prompt.strip():
        runs.single(cfg, prompt, new_tokens)
    tl = runs.shown(runs.stored(cfg, "single", (prompt, new_tokens)))
    if tl is not None:
        cols = st.columns(4)
        for col, (lab, val, how) in zip(cols, timeline_rows(tl)):
            col.metric(lab, val, help=how)
        srows = server_rows(tl)
        if srows:
            for col, (lab, val, how) in zip(st.columns(4), srows):
                col.metric(lab, val, help=how)
        chart(request_timeline(tl), "measured",
              f"Orange: from sending the request to its first chunk (queueing, prefill of "
              f"{tl.prompt_tokens if tl.prompt_tokens is not None else 'an unreported number of'} prompt tokens, first "
              f"decode, network). Blue: one bar per streamed chunk, from the previous chunk's arrival to its own. "
              f"Token count from {tl.token_source}."
              + (" Green: the server's own timings (prompt_ms, predicted_ms; durations on its clock, drawn ending "
                 "at the first token); grey: the part of the wait the server did not count (queueing, HTTP, "
                 "transport)." if srows else " This server sent no timings of its own."),
              key="serving_timeline")
        if len(tl.chunk_s) > 1:
            chart(itl_chart(tl), "measured", "Each bar is the wait before one chunk; the dashed line is the mean time "
                  "per output token. Spikes are the server (or the network) pausing.", key="serving_itl")
        for note in tl.notes:
            st.warning(md_escape(note), icon=":material/info:")
        with st.expander("The text the server streamed"):
            st.text(tl.text)


def next_token(cfg) -> None:
    st.markdown(lesson("serving", "logprobs"))
    c = st.columns([3, 1])
    nt_prompt = c[0].text_input("Text to continue", "The capital of France is", max_chars=2000, key="serving_nt_prompt")
    k = c[1].slider("Top tokens", 2, K.MAX_TOP_LOGPROBS, 10, key="serving_nt_k")
    if st.button("Ask for the next token", icon=":material/casino:", key="serving_nt") and nt_prompt.strip():
        runs.next_token(cfg, nt_prompt, k)
    nt = runs.shown(runs.stored(cfg, "next", (nt_prompt, k)))
    if nt is not None:
        chart(next_token_bars(nt), "measured",
              f"p = exp(logprob) as the server returned them for one greedy token; the top {len(nt.tokens)} cover "
              f"{nt.covered:.1%} of the probability.", key="serving_nt_bars")
        nav.link("pages/sampling.py", "Compare: the sampling page, on the local model")


def prompt_sweep(cfg) -> None:
    st.markdown(lesson("serving", "prompt sweep"))
    c = st.columns(3)
    lengths = c[0].multiselect("Prompt lengths (tokens, about)", [16, 32, 64, 128, 256, 512, 1024, 2048],
                               [16, 64, 256, 1024], key="serving_lengths", max_selections=6)
    sw_new = c[1].slider("New tokens per request", 4, 64, 16, key="serving_sw_new")
    sw_rep = c[2].slider("Repeats", 1, 3, 2, key="serving_sw_rep")
    b = st.columns([1, 1, 4])
    if b[0].button("Run the sweep", icon=":material/play_arrow:", key="serving_sweep_run") and lengths:
        b[1].button("Cancel", key="serving_sweep_cancel", help="Stops the sweep; its partial results are dropped.")
        runs.prompt_sweep(cfg, tuple(sorted(lengths)), sw_new, sw_rep)
    sw = runs.shown(runs.stored(cfg, "prompt_sweep", (tuple(sorted(lengths)), sw_new, sw_rep)))
    if sw is not None:
        chart(prompt_sweep_chart(sw), "measured",
              f"Medians over {sw.repeats} request(s) per length after a warm-up, whiskers min to max; each asks for "
              f"{sw.new_tokens} tokens. Prompt tokens: {sw.points[0].prompt_source}.", key="serving_prompt_sweep")


def concurrency(cfg, info) -> None:
    st.markdown(lesson("serving", "concurrency"))
    c = st.columns(3)
    levels = c[0].multiselect("Parallel requests", [1, 2, 4, 8, 16], [1, 2, 4, 8], key="serving_levels")
    cs_new = c[1].slider("New tokens per request", 4, 64, 24, key="serving_cs_new")
    cs_prompt = c[2].slider("Prompt tokens (about)", 16, 512, 64, key="serving_cs_prompt")
    st.caption(f"Bounds: at most {Me.MAX_CONCURRENCY} parallel and {Me.MAX_REQUESTS} requests per sweep, "
               f"{Me.MAX_SWEEP_S:.0f} s in all (a hard stop, whatever the server does), each request at most "
               f"{K.ServerConfig.request_timeout_s:.0f} s and {K.MAX_STREAM_BYTES // 2**20} MB, and one sweep per "
               "server at a time.")
    b = st.columns([1, 1, 4])
    if b[0].button("Run the sweep", icon=":material/play_arrow:", key="serving_cs_run") and levels:
        b[1].button("Cancel", key="serving_cs_cancel", help="Stops the sweep and closes the open requests.")
        runs.concurrency_sweep(cfg, tuple(sorted(levels)), cs_new, cs_prompt)
    cs = runs.shown(runs.stored(cfg, "concurrency", (tuple(sorted(levels)), cs_new, cs_prompt)))
    if cs is not None:
        st.markdown(Co.batching_verdict(cs.levels))
        target = st.number_input("Time per token a user should get (ms, p90)", 5, 5000, 100, step=5,
                                 key="serving_cs_target",
                                 help="The capacity verdict: how many users at once get each token within this "
                                      "time, at the 90th percentile of the requests of a level.")
        cap = Co.capacity(cs.levels, float(target))
        (st.success if cap.users else st.warning)(cap.text, icon=":material/groups:")
        chart(concurrency_chart(cs), "measured",
              "Throughput = all tokens / (first request sent \u2192 last token); latency = one request, sent \u2192 "
              "last token, median with min..max.", key="serving_cs_chart")
        chart(concurrency_gantt(cs.levels[-1]), "measured",
              "Each request's wait for its first token (orange) and its streaming (blue), on one clock.",
              key="serving_cs_gantt")
        st.dataframe(concurrency_table(cs), hide_index=True)

        st.subheader("Inside the server: /metrics and /slots")
        fig = kv_usage_chart(cs)
        kv_from = next((m.kv_name for lv in cs.levels for m in lv.metrics if m.kv_name), None)
        if fig is not None:
            chart(fig, "measured", "Sampled from the server every 0.25 s while each level ran (KV usage: "
                  f"{md_escape(kv_from or 'missing: this server exports no KV usage')}).", key="serving_kv")
        else:
            st.info("This server reported no KV-cache usage or running-request gauges during the sweep "
                    + ("(it has no /metrics endpoint and no /slots)." if not info.offer.has_metrics else
                       "(its /metrics has none of the names this page knows)."), icon=":material/info:")
        st.markdown(spec_text(cs))
        d = M.spec_delta(cs.metrics_before, cs.metrics_after) or {}
        live = spec_live_chart(cs)
        if live is not None and d.get("drafted"):  # a server that did not draft gets a sentence, not a flat line
            chart(live, "measured", "The server's drafted and accepted token counters (llama.cpp: "
                  "llamacpp:spec_decode_num_draft_tokens / _accepted_tokens), sampled every 0.25 s. llama.cpp adds a "
                  "request's drafts when the request finishes, hence the steps; the two lines coincide when every "
                  "drafted token is accepted.",
                  key="serving_spec_live")
            if d.get("accept_rate_per_pos"):
                chart(spec_per_position_chart(d["accept_rate_per_pos"]), "measured",
                      "Accepted tokens at each draft position during the sweep / drafts (verification steps), from "
                      "the server's per-position counter; compare the speculative page's race.",
                      key="serving_spec_pos")
