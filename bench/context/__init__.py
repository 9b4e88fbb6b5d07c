"""What the event context adds to the history's cells (docs/SHEDDING.md 13)."""
