"""Two models side by side (analysis)."""
