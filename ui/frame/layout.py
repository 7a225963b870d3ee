"""Page building blocks: header, lesson boxes, a chart with its caption, and the presenter view's sections.

Presenter view (the sidebar toggle, kept in the share link as ``present=1``): larger type, sidebar collapsed,
one section of a page at a time with one Previous section / Next section bar under the title, which stays in view
while a tall section scrolls (two bars, "Back" above and "Previous" below, read as two different things beside the
home page's own stage buttons), and each "Try this" answer behind a button. After Previous or Next the view
goes back to the top, so the new section's heading is on screen. Every page declares its sections with
``if section("Title"):``; the first one is the page's introduction. The page title stays above every section.
"""
from __future__ import annotations

import streamlit as st

from ui.frame import state
from ui.frame.figures import TICK_SIZE, caption, readable

_RUN = "_sections"  # this run's page key and the number of sections declared so far
_MOVED = "_present_moved"  # set by Previous / Next: the next run brings the view back to the top
_SCROLLS = "_scrolls"  # how many scroll scripts this session drew (each one new, so the browser runs it)


def presenting() -> bool:
    return state.settings().present


def begin_page(key: str) -> None:
    """Called by app.py once it knows the page: sections are counted per run, remembered per page. After
    Previous / Next the view goes back to the top of the page (title, bar, the new section's heading)."""
    st.session_state[_RUN] = {"page": key, "count": 0}
    if st.session_state.pop(_MOVED, False) and presenting():
        scroll_to_here(follow_s=1.5)


def _current_key() -> str:
    return f"present_section_{st.session_state.get(_RUN, {}).get('page', '')}"


def _total_key() -> str:
    return f"present_total_{st.session_state.get(_RUN, {}).get('page', '')}"


def section(title: str | None, divider: str = "gray", with_next: bool = False) -> bool:
    """Whether to draw this section (always, unless presenting and it is not the one on view); draws its
    header (``title`` None: the untitled introduction, or a block that draws its own headers, such as a fragment
    holding several numbered sections: presenter view shows it as one step). ``with_next``: a short introduction
    that presenter view shows on the same screen as the section after it (alone it left a projector two-thirds
    empty).

    Presenting, the bar is drawn under the title once the page declares its second step (a page of one step has
    nothing to move to); it works on a page that ends early with st.stop() further down."""
    run = st.session_state.setdefault(_RUN, {"page": "", "count": 0})
    index = run["count"]
    run["count"] += 1
    step = run.get("steps", 0) - (1 if run.pop("joined", False) else 0)  # a joined intro's step is the next one's
    run["steps"] = step + 1
    if with_next:
        run["joined"] = True
    if not presenting():
        if title:
            st.header(title, divider=divider)
        return True
    known = st.session_state.get(_total_key(), 0)  # the page's steps as its last run counted them (0: unknown)
    st.session_state[_total_key()] = max(known, run["steps"])
    cur = st.session_state.get(_current_key(), 0)
    if index == 0:  # the page's first section follows its title: a place for the bar...
        run["top"], run["known"] = st.empty(), known
    elif step == 1 and run.get("top") is not None and not run.get("bar"):  # ...filled once there is a second step
        run["bar"] = True
        with run["top"].container(key="present_bar"):
            _bar(cur, run["known"])
    if step == cur + 1:  # a step after the one on view exists: Next goes there
        _next(True)
    if step != cur:
        return False
    if title:
        st.header(title, divider=divider)
    return True


def _move(key: str, to: int) -> None:
    st.session_state[key] = to
    st.session_state[_MOVED] = True


def _bar(cur: int, total: int) -> None:
    """"Section i of n" / Previous section / Next section under the page title: on the first screen however tall
    the section is (the home page's loop picture fills 768 px), and kept in view while the section scrolls
    (ui/frame/style.py). ``total``: the sections the page's last run declared (0 when unknown), for the label
    until ``presenter_nav`` corrects it."""
    key = _current_key()
    label, prev, nxt = st.columns([4, 1.7, 1.7], vertical_alignment="center")
    slot = label.empty()  # "of n" is corrected after the page ran (a section may have appeared since last run)
    _label(slot, cur, total)
    st.session_state[_RUN]["label"] = (slot, cur)
    prev.button("Previous section", icon=":material/arrow_back:", disabled=cur == 0, key="present_prev",
                on_click=_move, args=(key, cur - 1), width="stretch")
    st.session_state[_RUN]["next"] = nxt.empty()  # filled once the page shows whether a next section exists


def _next(enabled: bool) -> None:
    """Next section, drawn once per run in the bar's slot: enabled when the page declared the section after the
    one on view (a page's sections can appear after a click, so last run's count cannot tell)."""
    run = st.session_state.get(_RUN, {})
    slot = run.pop("next", None)
    if slot is None:
        return
    key = _current_key()
    cur = st.session_state.get(key, 0)
    slot.button("Next section", icon=":material/arrow_forward:", disabled=not enabled, key="present_next",
                on_click=_move, args=(key, cur + 1), type="primary", width="stretch")


def scroll_to_here(follow_s: float = 0.0) -> None:
    """Bring this point of the page to the top of the view: after a button whose result starts here (the race's
    lanes after Start; a page's top after Previous / Next). For ``follow_s`` seconds it is brought back while the
    page below it is still being drawn (the browser cannot scroll past the end of a page that is still short),
    unless the person scrolls or presses a key first. A fixed script: no user text reaches it."""
    n = st.session_state.get(_SCROLLS, 0) + 1
    st.session_state[_SCROLLS] = n
    st.html(f"""<div id="ile-scroll-{n}" class="ile-scroll"></div><script>
(() => {{
  const el = document.getElementById("ile-scroll-{n}");
  if (!el) return;
  const box = el.closest('[data-testid="stElementContainer"]') || el;
  // what lies over the top of the view: Streamlit's top bar, and in presenter view the sticky section bar under it
  // (a margin of the top bar alone left the race's lane headings under the section bar)
  const covered = () => {{
    const head = document.querySelector('[data-testid="stHeader"]');
    let over = head ? head.offsetHeight : 0;
    const nav = document.querySelector('.st-key-present_bar');
    const wrap = nav && (nav.closest('[data-testid="stLayoutWrapper"]') || nav);
    if (wrap && getComputedStyle(wrap).position === "sticky") {{
      over = Math.max(over, (parseFloat(getComputedStyle(wrap).top) || 0) + wrap.offsetHeight);
    }}
    return over;
  }};
  let stop = false;
  const quit = () => {{ stop = true; }};
  for (const ev of ["wheel", "touchmove", "keydown"]) window.addEventListener(ev, quit, {{once: true, capture: true}});
  const until = Date.now() + {int(follow_s * 1000)};
  const go = () => {{
    if (stop || !box.isConnected) return;
    box.style.scrollMarginTop = (covered() + 4) + "px";
    box.scrollIntoView({{block: "start"}});
    if (Date.now() < until) setTimeout(go, 150);
  }};
  go();
}})();
</script>""", unsafe_allow_javascript=True)


def _label(slot, cur: int, total: int) -> None:
    slot.markdown(f"**Section {cur + 1} of {max(total, cur + 1)}**")


def presenter_nav() -> None:
    """After the page ran (app.py): remembers the page's number of sections and corrects "Section i of n"."""
    run = st.session_state.get(_RUN, {})
    total = run.get("steps", 0)
    if not presenting() or total < 2:
        return
    st.session_state[_total_key()] = total
    key = _current_key()
    cur = st.session_state.get(key, 0)
    if cur >= total:  # a remembered section this page no longer has (its sections changed): show the last one
        st.session_state[key] = total - 1
        st.rerun()
    _next(False)  # no section after the one on view
    if run.get("label"):
        _label(run["label"][0], run["label"][1], total)


def chart(fig, kind: str, text: str, key: str | None = None) -> None:
    """A plotly chart followed by its one-line caption (measured / model / derived / illustrative)."""
    if presenting():
        fig.update_layout(font_size=20, title_font_size=24)
    readable(fig, 20 if presenting() else TICK_SIZE)
    st.plotly_chart(fig, width="stretch", key=key, config={"displaylogo": False})
    st.caption(caption(kind, text))


def beside(main: int = 3, side: int = 2):
    """Two columns for a page's first screen: the key chart in ``main``, the lesson boxes (what you see, try
    this) in ``side``, so a 1366x768 projector shows the chart without scrolling. Returns (main, side)."""
    return st.columns([main, side], gap="medium")


def what_you_see(text: str) -> None:
    st.info(text, icon=":material/visibility:")


def try_this(question: str, answer: str, key: str) -> None:
    """A prediction first, then the reveal (presenter view: a button reveals it, so the room answers first)."""
    with st.container(border=True):
        st.markdown(f":material/psychology: **Try this.** {question}")
        if presenting():
            if st.toggle("Reveal the answer", key=f"{key}_reveal"):
                st.markdown(answer)
            return
        with st.expander("Made your prediction? Reveal what happens"):
            st.markdown(answer)


def common_mistake(text: str) -> None:
    """A frequent wrong answer, explained: a neutral teaching note (a red or yellow box reads as a failure of the
    app; errors are for errors)."""
    with st.container(border=True):
        st.markdown(f":material/lightbulb: **A common mistake.** {text}")


def notes(trace) -> None:
    for note in trace.encoded.notes:
        st.warning(note, icon=":material/info:")
