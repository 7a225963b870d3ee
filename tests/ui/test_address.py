"""Links for other machines (ui/frame/address.py) and what the start prints (scripts/warm.py): never the literal
"<this server's address>", never the teacher's own localhost for a class, and a plain line when no other machine can
open the server."""
from __future__ import annotations

import sys

from tests.conftest import ROOT
from ui.frame.address import for_others, for_others_from, is_local

sys.path.insert(0, str(ROOT / "scripts"))
from warm import start_lines  # noqa: E402


def test_local_names():
    assert all(map(is_local, ["127.0.0.1", "127.1.2.3", "localhost", "LOCALHOST", "::1", "[::1]", "app.localhost"]))
    assert not any(map(is_local, ["0.0.0.0", "", "192.0.2.2", "10.0.0.5", "teacher-laptop", "fd00::2"]))


def test_a_server_on_this_machine_only_says_so():
    r = for_others("127.0.0.1", 8501, lan="192.0.2.2")
    assert r.url == "http://localhost:8501" and "this machine only" in r.problem and "0.0.0.0" in r.problem


def test_a_server_on_every_interface_is_reached_by_its_network_address():
    for bind in ("0.0.0.0", "", "::"):
        r = for_others(bind, 9000, "/class/", lan="192.0.2.2")
        assert (r.url, r.problem) == ("http://192.0.2.2:9000/class", ""), bind
    none = for_others("0.0.0.0", 9000, lan="")
    assert none.url == "http://localhost:9000" and "no network address" in none.problem


def test_a_server_on_one_address_is_reached_by_it():
    assert for_others("10.0.0.7", 8501, lan="192.0.2.2").url == "http://10.0.0.7:8501"
    assert for_others("fd00::2", 8501, lan="192.0.2.2").url == "http://[fd00::2]:8501"


def test_the_teachers_browser_address_is_used_only_when_it_is_not_this_machine():
    teacher = "http://localhost:8501/batching?teacher=x"
    assert for_others_from(teacher, "0.0.0.0", 8501, lan="192.0.2.2").url == "http://192.0.2.2:8501"
    alone = for_others_from(teacher, "0.0.0.0", 8501, lan="")
    assert alone.url == "http://localhost:8501" and "no network address" in alone.problem
    via_lan = for_others_from("http://192.0.2.2:8501/batching?teacher=x", "0.0.0.0", 8501, lan="10.9.9.9")
    assert via_lan.url == "http://192.0.2.2:8501" and not via_lan.problem
    proxied = for_others_from("https://ile.school.example/app/batching", "127.0.0.1", 8501, "/app")
    assert proxied.url == "https://ile.school.example/app" and not proxied.problem


def test_the_start_prints_openable_links():
    one = start_lines(["--server.address", "127.0.0.1", "--server.port", "8600"], "Tok3n", 4242, lan="192.0.2.2")
    assert one[0].startswith("[start] The app: http://localhost:8600/") and "kill 4242" in one[0]
    assert "http://localhost:8600/batching?teacher=Tok3n" in one[1] and "this machine only" in one[2]
    room = start_lines(["--server.address", "127.0.0.1", "--server.address=0.0.0.0", "--server.port", "8600"],
                       "Tok3n", None, lan="192.0.2.2")
    assert "http://192.0.2.2:8600/" in room[0] and len(room) == 2
    assert room[1].endswith("http://192.0.2.2:8600/batching?teacher=Tok3n")
    for line in one + room:
        assert "<" not in line and line.count("[start]") == 1
