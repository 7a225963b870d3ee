"""The serving client against hostile servers on real sockets (tests/serving_servers.HostileServer, 127.0.0.1):
replies bounded in bytes, requests and sweeps bounded in time whatever the server sends, cancellation that
closes connections, no redirect followed, no compressed reply inflated, no reply body echoed, and in class mode
no request sent anywhere but the teacher's listed servers."""
import threading
import time

import pytest

from engine.jobs import job as jobs
from engine.jobs import worker
from engine.serving import client as C
from engine.serving import config as K
from engine.serving import errors as E
from engine.serving import fence as F
from engine.serving import concurrency as Co
from engine.serving import measure as Me
from engine.serving.probe import probe
from engine.serving.servers import ServerNotListed, ServerPolicy, parse_servers, server_policy_from_env
from tests.serving_servers import MB, HostileServer, OddServer, wait_for


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def cfg(server, **kw) -> K.ServerConfig:
    return K.ServerConfig(server.base_url, "odd", **kw)


# ------------------------------------------------------------------------------------------------ sizes
def test_a_1gb_reply_is_refused_at_the_cap_and_memory_stays_flat():
    with HostileServer("huge") as s:
        before = rss_mb()
        for _ in range(3):  # the issue saw ~2 GB kept per try: three tries must not add up
            with pytest.raises(E.UnexpectedReply, match="ran past 4,194,304 bytes; stopped reading") as e:
                C.list_models(cfg(s))
            assert wait_for(lambda: s.open == 0), "the connection was left open"
        grown = rss_mb() - before
        # the client stopped at its 4 MB cap: the server could only push the cap plus socket buffers
        assert s.sent < 3 * (K.MAX_REPLY_BYTES + 40 * MB), s.sent / MB
        assert grown < 100, f"RSS grew {grown:.0f} MB"
        assert "data" not in str(e.value)


def test_a_declared_1gb_reply_is_refused_before_reading():
    with HostileServer("huge_declared") as s:
        with pytest.raises(E.UnexpectedReply, match="would be 1,073,741,824 bytes"):
            C.list_models(cfg(s))
        assert wait_for(lambda: s.open == 0)
        assert s.sent < 40 * MB


def test_a_300mb_sse_line_is_refused_at_the_line_cap():
    with HostileServer("long_line") as s:
        before = rss_mb()
        with pytest.raises(E.UnexpectedReply, match="A line of the stream ran past 256 KB"):
            C.stream(cfg(s), "hi", 4)
        assert wait_for(lambda: s.open == 0)
        assert rss_mb() - before < 100
        assert s.sent < K.MAX_LINE_BYTES + 40 * MB


def test_an_endless_stream_of_valid_events_is_cut_at_the_stream_cap():
    """16 MB for one request; 2 MB for each request of a sweep (32 run at once: at most 64 MB in flight)."""
    with HostileServer("flood") as s:
        before = rss_mb()
        with pytest.raises(E.UnexpectedReply, match="ran past 16 MB"):
            C.stream(cfg(s), "hi", 4)
        with pytest.raises(E.UnexpectedReply, match="ran past 2 MB"):
            Co.concurrency_sweep(cfg(s), (1, 8), new_tokens=4, prompt_tokens=16, poll_metrics=False)
        assert rss_mb() - before < 100
        assert wait_for(lambda: s.open == 0)


def test_a_gzip_bomb_is_never_inflated():
    with HostileServer("gzip") as s:
        before = rss_mb()
        with pytest.raises(E.UnexpectedReply, match="compressed reply"):
            C.list_models(cfg(s))
        assert rss_mb() - before < 50
        assert s.requests == ["GET /v1/models"]


def test_a_megabyte_of_headers_is_refused_cleanly():
    with HostileServer("headers") as s:
        with pytest.raises(E.ServerError, match="not valid HTTP"):
            C.list_models(cfg(s))


def test_no_reply_body_is_echoed_in_an_error():
    with HostileServer("secret") as s:
        errors = []
        for call in (lambda: probe(cfg(s)), lambda: C.stream(cfg(s), "hi", 4),
                     lambda: C.get_json(cfg(s), "/metrics")):
            with pytest.raises(E.ServingError) as e:
                call()
            errors.append(str(e.value))
        assert not any(HostileServer.SECRET in m or "<html" in m for m in errors), errors
        assert "did not answer JSON" in errors[0] and "not JSON" in errors[1] and "500" in errors[2]


# ------------------------------------------------------------------------------------------------ time
def test_a_dripping_reply_is_stopped_at_the_request_deadline():
    """One byte every 0.5 s never trips a read timeout; the total deadline (3 s) stops it anyway."""
    with HostileServer("drip", drip_s=0.5) as s:
        c = cfg(s, read_timeout_s=30, request_timeout_s=3)
        for call in (lambda: C.stream(c, "hi", 4), lambda: C.list_models(c)):
            t0 = time.monotonic()
            with pytest.raises(E.ServerTimeout, match="total time limit"):
                call()
            took = time.monotonic() - t0
            assert 2.9 < took < 4.0, took
            assert wait_for(lambda: s.open == 0), "the dripping connection was left open"


def test_keepalive_comments_do_not_keep_a_request_alive():
    with HostileServer("keepalive") as s:
        t0 = time.monotonic()
        with pytest.raises(E.ServerTimeout, match="sent no tokens for 2 s"):
            C.stream(cfg(s, read_timeout_s=2, request_timeout_s=60), "hi", 4)
        assert time.monotonic() - t0 < 3.0
        assert wait_for(lambda: s.open == 0)


def test_a_16_request_sweep_against_a_silent_server_ends_by_its_cap():
    """Levels 1, 2, 4, 8 plus the warm-up: 16 requests; the server reads each and never answers. The sweep's cap
    (4 s here, 300 s on the page) is a deadline every socket of the sweep obeys, so it ends by then."""
    with HostileServer("silent") as s:
        t0 = time.monotonic()
        with pytest.raises(E.ServerTimeout, match="time allowed for this measurement ran out"):
            Co.concurrency_sweep(cfg(s), (1, 2, 4, 8), new_tokens=4, prompt_tokens=16, max_s=4)
        took = time.monotonic() - t0
        assert took < 4.0 + 2.0, took  # the cap, plus closing 16 sockets and joining their threads on a busy machine
        assert wait_for(lambda: s.open == 0, 2), "connections left open after the sweep"
        t0 = time.monotonic()
        with pytest.raises(E.ServerTimeout):
            Me.prompt_sweep(cfg(s), (16, 64), new_tokens=4, repeats=2, max_s=3)
        assert time.monotonic() - t0 < 3.0 + 2.0


def test_a_sweep_that_runs_out_of_time_keeps_what_it_measured():
    with OddServer("plain") as s:
        # 1.5 s: the first level must fit even on a loaded machine (at 0.5 s none did once beside a full suite)
        sw = Co.concurrency_sweep(cfg(s), (1, 2, 4, 8, 16, 32), new_tokens=4, prompt_tokens=16, max_s=1.5,
                                  poll_metrics=False)
        assert sw.levels and sw.truncated or len(sw.levels) == 6


# ------------------------------------------------------------------------------------------------ cancel
def test_cancel_mid_request_closes_the_connection_at_once():
    with HostileServer("silent") as s:
        cancel = threading.Event()
        out = {}

        def go():
            t0 = time.monotonic()
            try:
                probe(cfg(s), cancel=cancel)
            except E.ServingError as exc:
                out["exc"], out["t"] = exc, time.monotonic() - t0

        t = threading.Thread(target=go)
        t.start()
        assert wait_for(lambda: s.open == 1)  # connected, request sent, waiting for the answer
        time.sleep(0.3)
        cancel.set()
        t.join(2)
        assert isinstance(out.get("exc"), E.RequestCancelled)
        assert wait_for(lambda: s.open == 0, 1.0), "the connection outlived the cancel"


def test_a_job_whose_tab_left_is_cancelled_and_its_connection_closed():
    """The page's mechanism without the browser: the probe runs as a job on the network worker with
    jobs.cancel_event(); the waiter detaches (what ui.frame.work.run does when Streamlit stops the script of a closed
    tab); the worker's grace passes, the job stops and the server sees the connection close."""
    with HostileServer("silent") as s:
        net = worker.get_net_worker()

        def job():
            try:
                return probe(cfg(s, read_timeout_s=120, request_timeout_s=120), cancel=jobs.cancel_event())
            except E.ServingError as exc:
                return exc

        j = net.submit(job, key=("test", s.port), session="tab-1")
        assert wait_for(lambda: s.open == 1)
        t0 = time.monotonic()
        j.detach()
        assert wait_for(lambda: s.open == 0, jobs.DETACH_GRACE_S + 2), "the connection outlived the tab"
        assert time.monotonic() - t0 < jobs.DETACH_GRACE_S + 1.0
        assert isinstance(j.result(2), E.RequestCancelled)


def test_net_worker_runs_jobs_side_by_side():
    """A silent server's job must not hold up another session's (the engine worker has one thread)."""
    with HostileServer("silent") as slow, OddServer("plain") as ok:
        net = worker.get_net_worker()
        stop = threading.Event()
        j1 = net.submit(lambda: _swallow(lambda: probe(cfg(slow), cancel=stop)), key="a", session="s1")
        assert wait_for(lambda: slow.open == 1)
        t0 = time.monotonic()
        info = net.submit(lambda: probe(cfg(ok)), key="b", session="s2").result(5)
        assert info.models == ("odd",) and time.monotonic() - t0 < 2
        stop.set()
        j1.result(3)


def _swallow(fn):
    try:
        return fn()
    except E.ServingError as exc:
        return exc


# ------------------------------------------------------------------------------------------------ where
def test_redirects_are_not_followed():
    with HostileServer("silent") as target, HostileServer("redirect", location=target.base_url) as s:
        with pytest.raises(E.UnexpectedReply, match="redirect \\(302\\)"):
            C.list_models(cfg(s))
        time.sleep(0.2)
        assert target.connections == 0


def test_a_listed_server_that_redirects_cannot_lead_elsewhere():
    """Class mode: the teacher's server 302s to an unlisted address (or to its own address spelled otherwise):
    nothing follows, nothing is sent there, and the message names the label only."""
    with HostileServer("silent") as target:
        for location in (target.base_url, f"http://localhost:{target.port}", f"http://[::1]:{target.port}"):
            with HostileServer("redirect", location=location) as listed:
                c = ServerPolicy(True, (("gpu", listed.base_url),)).config("gpu")
                with pytest.raises(E.UnexpectedReply, match="redirect") as e:
                    probe(c)
                with pytest.raises(E.UnexpectedReply, match="redirect"):
                    C.stream(c, "hi", 4)
                assert "127.0.0.1" not in str(e.value) and location not in str(e.value)
        time.sleep(0.2)
        assert target.connections == 0


LOOPBACK_SPELLINGS = ["http://localhost:{p}", "http://127.1:{p}", "http://2130706433:{p}", "http://0x7f000001:{p}",
                      "http://[::1]:{p}", "http://[::ffff:127.0.0.1]:{p}", "http://127.0.0.1:{p}",
                      "http://0.0.0.0:{p}", "{p}", "127.0.0.1:{p}/v1"]


def test_class_mode_refuses_every_address_and_sends_nothing():
    """Class mode takes labels only: no spelling of an address (not even the listed server's own) is accepted,
    and nothing reaches the hostile server."""
    with HostileServer("secret") as s, OddServer("plain") as listed:
        pol = server_policy_from_env({"ILE_CLASS_MODE": "on", "ILE_SERVERS": f"gpu={listed.base_url}"})
        assert pol.class_mode and pol.labels == ["gpu"]
        for spelling in LOOPBACK_SPELLINGS + [f"http://169.254.169.254:{s.port}", f"https://10.0.0.1:{s.port}"]:
            with pytest.raises(ServerNotListed, match="only to the serving engines it lists: gpu") as e:
                pol.config(spelling.format(p=s.port))
            assert str(s.port) not in str(e.value) and listed.base_url not in str(e.value)
        c = pol.config(" GPU ")
        assert c.label == "gpu" and c.fenced and c.where == "'gpu'"
        assert probe(c).models == ("odd",)
        assert s.connections == 0


def test_a_fenced_client_connects_nowhere_else():
    with HostileServer("silent") as other, OddServer("plain") as listed:
        c = ServerPolicy(True, (("gpu", listed.base_url),)).config("gpu")
        with F.make_client(c) as cl:
            with pytest.raises(E.BadURL, match="not on this server's list"):
                cl.get(other.base_url + "/v1/models")
            with pytest.raises(E.BadURL):
                cl.get(f"http://localhost:{listed.httpd.server_address[1]}/v1/models")  # same port, other name
        assert other.connections == 0


def test_class_mode_messages_name_the_label_never_the_address():
    with HostileServer("silent") as s:
        c = ServerPolicy(True, (("gpu", s.base_url),)).config("gpu", read_timeout_s=0.5, request_timeout_s=0.8)
        with pytest.raises(E.ServingError) as e:
            probe(c)
        assert "'gpu'" in str(e.value) and "127.0.0.1" not in str(e.value) and str(s.port) not in str(e.value)


def test_open_mode_is_open_and_the_list_is_parsed_strictly():
    pol = server_policy_from_env({"ILE_CLASS_MODE": "off", "ILE_SERVERS": "gpu=http://10.0.0.5:8000"})
    assert not pol.class_mode and pol.config("http://127.0.0.1:9").base_url == "http://127.0.0.1:9"
    assert parse_servers("a=http://h:1/v1, A=http://h:2, b=ftp://x, c=, http://h:3, d=http://u:p@h:4") == (
        ("a", "http://h:1"), ("server 2", "http://h:3"))
    empty = server_policy_from_env({"ILE_CLASS_MODE": "on"})
    with pytest.raises(ServerNotListed, match="lists no serving engines"):
        empty.config("http://127.0.0.1:1")
