"""AppTest: the serving page before connecting, with bad servers (clear messages, no exception, other pages fine),
and connected to a real tiny HTTP server on 127.0.0.1; the API key never reaches the URL."""
import re

from tests.app.test_pages import errors, run_page
from tests.serving_servers import OddServer, free_port

PAGE = "pages/serving.py"


def connect(at, url: str, model: str = "", key: str = ""):
    at.text_input(key="serving_url").set_value(url)
    at.text_input(key="serving_model").set_value(model)
    at.text_input(key="serving_key").set_value(key)
    next(b for b in at.button if b.label == "Connect").click()
    at.run()
    return at


def texts(at) -> str:
    return " ".join([e.value for e in at.error] + [w.value for w in at.warning] + [i.value for i in at.info])


def test_page_waits_for_connect():
    at = run_page(PAGE, model="tiny-random", max_new_tokens="2")
    assert not errors(at)
    assert "Press **Connect**" in texts(at)


def test_refused_connection_message_and_app_keeps_working():
    at = run_page(PAGE, model="tiny-random", max_new_tokens="2")
    connect(at, f"http://127.0.0.1:{free_port()}", "m")
    assert not errors(at)
    assert "Could not connect" in texts(at) and "refused" not in texts(at)
    at.switch_page("pages/loop.py")
    at.run()
    assert not errors(at) and at.title


def test_bad_url_and_key_in_url_refused():
    at = run_page(PAGE, model="tiny-random", max_new_tokens="2")
    connect(at, "http://user:pw@127.0.0.1:1")
    assert not errors(at) and "API key field" in texts(at)


def test_connected_shows_offers_and_keeps_key_out_of_link():
    with OddServer("metrics") as s:
        at = run_page(PAGE, model="tiny-random", max_new_tokens="2")
        connect(at, s.base_url + "/v1", "odd", key="sk-never-in-url")
        assert not errors(at)
        table = at.dataframe[0].value
        values = dict(zip(table["what"], table["this server"]))
        assert values["KV-cache usage"] == "vllm:kv_cache_usage_perc" and values["Engine"] == "vLLM"
        params = {k: at.query_params[k] for k in at.query_params}
        assert params.get("serve_url") == [s.base_url] or params.get("serve_url") == s.base_url
        assert "sk-never-in-url" not in repr(params)


def test_every_section_runs_against_a_vllm_like_server():
    """The tiny server streams 5 tokens without logprobs and serves vLLM-named /metrics (written by
    prometheus_client): every section renders, the missing logprobs get a clear message, the metrics panels fill."""
    with OddServer("metrics") as s:
        at = run_page(PAGE, model="tiny-random", max_new_tokens="2")
        connect(at, s.base_url, "odd")
        for key in ("serving_send", "serving_nt", "serving_sweep_run", "serving_cs_run"):
            at.button(key=key).click()
            at.run()
            assert not errors(at), (key, errors(at))
        shown = texts(at) + " ".join(m.value for m in at.markdown)
        assert "**No logprobs.** The server streamed the token but no log" in shown  # explained
        assert "drafted" in shown and "accepted" in shown  # spec-decode counters read from /metrics
        assert len(at.get("plotly_chart")) >= 6  # timeline, gaps, prompt sweep, concurrency, gantt, KV usage


# --- class mode: the teacher's servers only, by label ---------------------------------------------

def everything(at) -> str:
    parts = [e.value for kind in ("markdown", "caption", "success", "error", "warning", "info", "title", "header",
                                  "subheader", "text") for e in getattr(at, kind)]
    parts += [str(d.value.to_dict()) for d in at.dataframe]
    parts += [str(w.options) + str(w.value) for w in at.selectbox]
    return " ".join(str(p) for p in parts)


def test_class_mode_offers_listed_servers_by_label_and_nothing_else(monkeypatch):
    from tests.serving_servers import HostileServer

    with OddServer("metrics") as listed, HostileServer("secret") as hostile:
        monkeypatch.setenv("ILE_CLASS_MODE", "on")
        monkeypatch.setenv("ILE_MODELS", "tiny-random")
        monkeypatch.setenv("ILE_SERVERS", f"teacher gpu={listed.base_url}")
        port = str(listed.httpd.server_address[1])
        # a link made by a hostile student: an address of their choosing and a label that is not listed
        at = run_page(PAGE, model="tiny-random", max_new_tokens="2", serve_url=hostile.base_url, serve="nope")
        assert not errors(at), errors(at)
        assert not [t for t in at.text_input if t.key == "serving_url"]  # no address field at all
        box = at.selectbox(key="serving_server")
        assert box.options == ["teacher gpu"] and box.value == "teacher gpu"
        next(b for b in at.button if b.label == "Connect").click()
        at.run()
        assert not errors(at), errors(at)
        at.button(key="serving_send").click()
        at.run()
        assert not errors(at), errors(at)
        page = everything(at)
        assert "Connected to" in page and "teacher gpu" in page and "Time to first token" in " ".join(
            m.label for m in at.metric)
        assert port not in page and listed.base_url not in page  # the address never reaches the page
        params = {k: at.query_params[k] for k in at.query_params}
        assert params.get("serve") in ("teacher gpu", ["teacher gpu"]) and port not in repr(params)
        assert hostile.connections == 0  # nothing was sent to the student's address


def test_class_mode_without_a_list_connects_nowhere(monkeypatch):
    from tests.serving_servers import HostileServer

    with HostileServer("secret") as hostile:
        monkeypatch.setenv("ILE_CLASS_MODE", "on")
        monkeypatch.setenv("ILE_MODELS", "tiny-random")
        monkeypatch.delenv("ILE_SERVERS", raising=False)
        at = run_page(PAGE, model="tiny-random", max_new_tokens="2", serve_url=hostile.base_url)
        assert not errors(at)
        assert "lists no serving engines" in texts(at)
        assert not at.text_input and hostile.connections == 0


def test_a_newer_click_takes_over_the_server_from_the_job_it_replaced():
    """One measurement per server at a time: a newer click detaches the running job; the new one waits the
    second it takes the old one to stop (and close its connection), instead of being told the server is busy."""
    import time

    from engine.jobs import worker
    from engine.serving import config as K
    from engine.serving import errors as E
    from engine.serving.probe import probe
    from tests.serving_servers import HostileServer, wait_for
    from ui.serving import runs

    with HostileServer("silent") as s:
        cfg = K.ServerConfig(s.base_url, "odd")
        net = worker.get_net_worker()
        old = net.submit(runs._job, cfg, lambda p, c: probe(cfg, cancel=c), True, key="old", session="tab")
        end = time.monotonic() + 5
        while s.open == 0 and time.monotonic() < end:
            time.sleep(0.02)
        assert s.open == 1
        old.detach()  # what ui.frame.work.run does when the newer click reruns the script
        new = net.submit(runs._job, cfg, lambda p, c: "measured", True, key="new", session="tab")
        assert new.result(runs.LOCK_WAIT_S + 2) == "measured"
        assert isinstance(old.result(2), E.RequestCancelled)
        assert wait_for(lambda: s.open == 0, 2), "the replaced job's connection was left open"


def links_in(markdown: str) -> list[str]:
    """What Streamlit's markdown would make clickable in ``markdown``: the links CommonMark renders (markdown-it,
    the reference parser) and, in its text, what GitHub's autolink-literal extension (remark-gfm in the browser)
    turns into a link: http:// and https:// URLs, www. names and e-mail addresses."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    tokens = md.parseInline(markdown)
    found = []
    for tok in tokens:
        for child in tok.children or ():
            if child.type == "link_open":
                found.append(child.attrs.get("href", ""))
            elif child.type in ("html_inline",) and "<a" in child.content.lower():
                found.append(child.content)
            elif child.type == "text":
                found += re.findall(r"(?i)https?://\S+|\bwww\.\S+|[\w.+-]+@[\w-]+\.[\w.-]+", child.content)
    return found


def test_a_listed_servers_error_text_is_never_a_link(monkeypatch):
    """A listed serving engine answers 401 with a phishing text (bare URLs, a markdown link, an e-mail address,
    a www. name, an HTML link): the student's error box shows it as inert text, nothing in it clickable."""
    from tests.serving_servers import PHISH

    with OddServer("phish") as listed:
        monkeypatch.setenv("ILE_CLASS_MODE", "on")
        monkeypatch.setenv("ILE_MODELS", "tiny-random")
        monkeypatch.setenv("ILE_SERVERS", f"teacher gpu={listed.base_url}")
        at = run_page(PAGE, model="tiny-random", max_new_tokens="2")
        next(b for b in at.button if b.label == "Connect").click()
        at.run()
        assert not errors(at), errors(at)
        boxes = [e.value for e in at.error]
        assert boxes and "log in again at" in " ".join(boxes), boxes
        assert links_in(PHISH), "the check itself finds the links in the raw text"
        for box in boxes:
            assert not links_in(box), f"clickable in the error box: {links_in(box)}"
