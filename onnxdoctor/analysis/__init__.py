"""Pure analysis: classify records into findings, propose fixes, judge fix runs."""
