-- Views added after version 2 was released: an older file gets them when it is next opened for
-- writing, after its upgrade to the current version (so a view may read that version's columns),
-- and each one says IF NOT EXISTS because this runs on every such opening.
CREATE VIEW IF NOT EXISTS um_sum AS
SELECT m.cell_id, e.label AS operation, sum(m.bytes) AS total_bytes, count(*) AS count,
       avg(m.bytes) AS avg_bytes, min(m.bytes) AS min_bytes, max(m.bytes) AS max_bytes,
       sum(m."end" - m.start) AS total_ns
FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = m.copyKind
WHERE m.copyKind IN (11, 12)
GROUP BY m.cell_id, m.copyKind;

-- The memory estimator against what was measured, one row per GPU cell that has both: error_pct
-- is (predicted − measured) / measured, in percent, for the peak (NVML's, less the memory in use
-- before the cell) and for sweetspot's own allocations (what the backend and the forward report
-- they allocated).
CREATE VIEW IF NOT EXISTS memory_accuracy AS
SELECT cell_id, model, backend, variant, dtype, batch, seq, budget,
       predicted_peak_bytes, gpu_peak_bytes,
       100.0 * (predicted_peak_bytes - gpu_peak_bytes) / gpu_peak_bytes AS peak_error_pct,
       predicted_alloc_bytes, device_weight_bytes + activation_bytes AS allocated_bytes,
       100.0 * (predicted_alloc_bytes - (device_weight_bytes + activation_bytes))
             / (device_weight_bytes + activation_bytes) AS alloc_error_pct,
       gpu_context_bytes, gpu_own_peak_bytes, gpu_other_processes, gpu_other_bytes
FROM cells
WHERE status = 'ok' AND gpu_peak_bytes > 0 AND predicted_alloc_bytes IS NOT NULL;

-- The estimator's peak host memory against the cell process's peak resident memory, one row per
-- ok GPU cell that has both: error_pct is (predicted − measured) / measured, in percent.
CREATE VIEW IF NOT EXISTS host_memory_accuracy AS
SELECT cell_id, model, backend, variant, dtype, batch, seq, budget, check_reference_computed,
       predicted_host_peak_bytes, peak_host_rss_bytes,
       100.0 * (predicted_host_peak_bytes - peak_host_rss_bytes) / peak_host_rss_bytes AS host_error_pct
FROM cells
WHERE status = 'ok' AND peak_host_rss_bytes > 0 AND predicted_host_peak_bytes IS NOT NULL;
