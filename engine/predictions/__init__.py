"""The class predicts, the measurement grades: which choice of a lesson's "Try this" question this run's own
numbers decide (grading)."""
