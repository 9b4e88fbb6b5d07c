"""The shedding benchmark: recall of match bundles under a budget, per policy (issue 4)."""
