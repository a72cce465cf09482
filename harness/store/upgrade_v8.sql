-- Version 8 to 9: the estimator predicts each GPU cell's peak host memory
-- (predicted_host_peak_bytes, set against peak_host_rss_bytes by the view host_memory_accuracy,
-- which later_views.sql adds; predicted_host_alloc_bytes, the part the estimator accounts for
-- without the process's own memory), and a cell says whether its check ran the host reference
-- forward or reused the database's kept reference (check_reference_computed): the host memory
-- differs.
-- explicit-copy pins only the units it streams, so a cell stores the bytes it pinned
-- (pinned_host_bytes); before, it pinned every weight byte.
ALTER TABLE cells ADD COLUMN predicted_host_peak_bytes INTEGER;
ALTER TABLE cells ADD COLUMN predicted_host_alloc_bytes INTEGER;
ALTER TABLE cells ADD COLUMN pinned_host_bytes INTEGER;
ALTER TABLE cells ADD COLUMN check_reference_computed INTEGER;
UPDATE schema_info SET version = 9;
PRAGMA user_version = 9;
