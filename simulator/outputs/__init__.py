"""What a run is turned into for people and tools: the Chrome/Perfetto trace, the record
CSV, atomic file writes, and the text a terminal shows."""
