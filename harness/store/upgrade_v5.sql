-- Version 5 to 6: the prefetch_api axis (cells before it prefetched with single calls), each GPU
-- cell's predicted peak, its memory as NVML read it around the cell
-- (harness/measure/gpu_memory_watch.hpp), and each cell's phases, which cells recorded before
-- have not. The view that sets
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
ALTER TABLE cells ADD COLUMN gpu TEXT;
-- Where each cell's wall time went; cells recorded before have no rows.
CREATE TABLE cell_phases (
    cell_id  INTEGER NOT NULL REFERENCES cells(cell_id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    phase    TEXT NOT NULL,
    seconds  REAL NOT NULL,
    PRIMARY KEY (cell_id, position)
);
-- Earlier measurements a newer one replaced; before version 6 they were deleted.
CREATE TABLE cell_history (
    history_id    INTEGER PRIMARY KEY,
    cell_key      TEXT NOT NULL,
    superseded_at TEXT NOT NULL,
    cell          TEXT NOT NULL,
    iterations    TEXT NOT NULL
);
CREATE INDEX cell_history_key ON cell_history (cell_key);
UPDATE schema_info SET version = 6;
PRAGMA user_version = 6;
