-- Version 5 to 6: the prefetch_api axis (cells before it prefetched with single calls), each GPU
-- cell's predicted peak, and its memory as NVML read it around the cell
-- (harness/measure/gpu_memory_watch.hpp), which cells recorded before have not. The view that sets
-- them side by side, memory_accuracy, is in later_views.sql.
ALTER TABLE cells ADD COLUMN prefetch_api TEXT NOT NULL DEFAULT 'single';
ALTER TABLE cells ADD COLUMN predicted_peak_bytes INTEGER;
ALTER TABLE cells ADD COLUMN gpu_used_before_bytes INTEGER;
ALTER TABLE cells ADD COLUMN gpu_context_bytes INTEGER;
ALTER TABLE cells ADD COLUMN gpu_peak_bytes INTEGER;
ALTER TABLE cells ADD COLUMN gpu_own_peak_bytes INTEGER;
ALTER TABLE cells ADD COLUMN gpu_other_processes INTEGER;
ALTER TABLE cells ADD COLUMN gpu_other_bytes INTEGER;
ALTER TABLE cells ADD COLUMN gpu_memory_readings INTEGER;
ALTER TABLE cells ADD COLUMN gpu_memory_note TEXT;
UPDATE schema_info SET version = 6;
PRAGMA user_version = 6;
