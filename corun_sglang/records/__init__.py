"""Layer 2, records: what a probe verified (decode tiers, a prefill pack) and the environment it verified it in,
read and written through strict schemas. Imports ``core`` alone."""
