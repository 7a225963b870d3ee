"""Display values of a saved run (ui/record/view.py)."""
from ui.record.view import wall_speedup


def test_a_saved_race_speedup_is_said_once_and_a_differing_one_is_named():
    assert wall_speedup("2.18x", 2.1811) == "2.18x"  # it read "2.18x (2.18x)"
    assert wall_speedup("2.31x", 2.18) == "2.31x (the race recorded here: 2.18x)"  # the median of 5 vs this race
    assert wall_speedup("no gain", 1.03) == "no gain (the race recorded here: 1.03x)"
