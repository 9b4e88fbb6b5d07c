"""Edge benchmark: agent memory and overhead, collector ingest rate, kill/restart soak."""
