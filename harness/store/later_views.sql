-- Views added after version 2 was released, without a version change (no new data): a version-2
-- file from before them gets them when it is next opened for writing, so each one says IF NOT EXISTS.
CREATE VIEW IF NOT EXISTS um_sum AS
SELECT m.cell_id, e.label AS operation, sum(m.bytes) AS total_bytes, count(*) AS count,
       avg(m.bytes) AS avg_bytes, min(m.bytes) AS min_bytes, max(m.bytes) AS max_bytes,
       sum(m."end" - m.start) AS total_ns
FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = m.copyKind
WHERE m.copyKind IN (11, 12)
GROUP BY m.cell_id, m.copyKind;
