-- Views and indexes over the tables, made on every opening for writing after `cells` has every
-- declared column (so a view may read the current version's columns); each says IF NOT EXISTS.
-- A view whose text changes must be dropped by the schema step of its version
-- (harness/store/schema.cpp).
CREATE INDEX IF NOT EXISTS cells_run ON cells(run_id);
CREATE VIEW IF NOT EXISTS cell_summary AS
SELECT cell_id, model, backend, variant, dtype, batch, seq, streams, prefetch, budget,
       status, latency_median_ms, latency_p10_ms, latency_p90_ms, tokens_per_s,
       check_rel_err, reason
FROM cells;

CREATE VIEW IF NOT EXISTS cuda_gpu_kern_sum AS
SELECT k.cell_id,
       100.0 * sum(k."end" - k.start) / sum(sum(k."end" - k.start)) OVER (PARTITION BY k.cell_id) AS time_percent,
       sum(k."end" - k.start) AS total_ns,
       count(*) AS instances,
       avg(k."end" - k.start) AS avg_ns,
       min(k."end" - k.start) AS min_ns,
       max(k."end" - k.start) AS max_ns,
       s.value AS name
FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
GROUP BY k.cell_id, k.shortName;

CREATE VIEW IF NOT EXISTS nvtx_sum AS
SELECT n.cell_id,
       100.0 * sum(n."end" - n.start) / sum(sum(n."end" - n.start)) OVER (PARTITION BY n.cell_id) AS time_percent,
       sum(n."end" - n.start) AS total_ns,
       count(*) AS instances,
       avg(n."end" - n.start) AS avg_ns,
       min(n."end" - n.start) AS min_ns,
       max(n."end" - n.start) AS max_ns,
       coalesce(n.text, s.value) AS range
FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId
GROUP BY n.cell_id, coalesce(n.text, s.value);

-- NVTX ranges projected onto the GPU, as nsys's nvtx_gpu_proj_trace report projects them: a range's
-- GPU work is every kernel and copy launched by a runtime or driver API call that the range's thread
-- made inside the range (matched by correlationId); the projection runs from the first of them to
-- start to the last to end. A range that launched nothing has no row. An enclosing range launched
-- everything its inner ones did, so projections nest as the ranges do; lvl counts the ranges of the
-- thread around this one (ranges are stored as they end, so of two with the same times the later
-- row encloses the earlier).
CREATE VIEW IF NOT EXISTS nvtx_gpu_proj_trace AS
WITH launches AS (
    SELECT cell_id, correlationId, globalTid, min(start) AS start
    FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY cell_id, correlationId
), gpu_ops AS (
    SELECT cell_id, correlationId, start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL
    UNION ALL
    SELECT cell_id, correlationId, start, "end" FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE correlationId <> 0
)
SELECT n.cell_id, n.rowid AS range_id, coalesce(n.text, s.value) AS name,
       min(g.start) AS projected_start, max(g."end") AS projected_end,
       max(g."end") - min(g.start) AS projected_duration,
       n.start AS orig_start, n."end" AS orig_end, n."end" - n.start AS orig_duration,
       n.globalTid, count(*) AS num_gpu_ops,
       (SELECT count(*) FROM NVTX_EVENTS p
         WHERE p.cell_id = n.cell_id AND p.globalTid = n.globalTid AND p.start <= n.start AND p."end" >= n."end"
           AND (p.start < n.start OR p."end" > n."end" OR p.rowid > n.rowid)) AS lvl
FROM NVTX_EVENTS n
LEFT JOIN StringIds s ON s.id = n.textId
JOIN launches l ON l.cell_id = n.cell_id AND l.globalTid = n.globalTid AND l.start BETWEEN n.start AND n."end"
JOIN gpu_ops g ON g.cell_id = l.cell_id AND g.correlationId = l.correlationId
GROUP BY n.rowid;

-- The projected ranges by name, as nsys's nvtx_gpu_proj_sum report sums them.
CREATE VIEW IF NOT EXISTS nvtx_gpu_proj_sum AS
SELECT cell_id, name AS range,
       sum(projected_duration) AS total_proj_ns, sum(orig_duration) AS total_range_ns,
       count(*) AS range_instances, avg(projected_duration) AS proj_avg_ns,
       min(projected_duration) AS proj_min_ns, max(projected_duration) AS proj_max_ns,
       sum(num_gpu_ops) AS total_gpu_ops, avg(lvl) AS avg_range_lvl
FROM nvtx_gpu_proj_trace
GROUP BY cell_id, name;

CREATE VIEW IF NOT EXISTS um_total_sum AS
SELECT c.cell_id,
       (SELECT coalesce(sum(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
         WHERE m.cell_id = c.cell_id AND m.copyKind = 11) AS htod_bytes,
       (SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
         WHERE m.cell_id = c.cell_id AND m.copyKind = 11) AS htod_migrations,
       (SELECT coalesce(sum(bytes), 0) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
         WHERE m.cell_id = c.cell_id AND m.copyKind = 12) AS dtoh_bytes,
       (SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m
         WHERE m.cell_id = c.cell_id AND m.copyKind = 12) AS dtoh_migrations,
       (SELECT count(*) FROM CUDA_UM_CPU_PAGE_FAULT_EVENTS f WHERE f.cell_id = c.cell_id) AS cpu_page_faults,
       (SELECT coalesce(sum(numberOfPageFaults), 0) FROM CUDA_UM_GPU_PAGE_FAULT_EVENTS f
         WHERE f.cell_id = c.cell_id) AS gpu_page_faults
FROM cells c WHERE c.um_profiling IS NOT NULL;

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
-- they allocated, a training cell's gradients and optimizer state included).
CREATE VIEW IF NOT EXISTS memory_accuracy AS
SELECT cell_id, model, backend, variant, dtype, batch, seq, budget,
       predicted_peak_bytes, gpu_peak_bytes,
       100.0 * (predicted_peak_bytes - gpu_peak_bytes) / gpu_peak_bytes AS peak_error_pct,
       predicted_alloc_bytes,
       device_weight_bytes + activation_bytes + coalesce(training_state_bytes, 0) AS allocated_bytes,
       100.0 * (predicted_alloc_bytes - (device_weight_bytes + activation_bytes + coalesce(training_state_bytes, 0)))
             / (device_weight_bytes + activation_bytes + coalesce(training_state_bytes, 0)) AS alloc_error_pct,
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
