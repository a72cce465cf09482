-- Version 3 to 4: the GPU's managed-memory abilities and the run's managed-memory probe. Runs
-- recorded before have neither (NULL attributes, no probe rows).
ALTER TABLE runs ADD COLUMN concurrent_managed_access INTEGER;
ALTER TABLE runs ADD COLUMN pageable_memory_access INTEGER;
ALTER TABLE runs ADD COLUMN pageable_memory_access_uses_host_page_tables INTEGER;
ALTER TABLE runs ADD COLUMN direct_managed_mem_access_from_host INTEGER;
CREATE TABLE managed_probe (
    run_id     INTEGER NOT NULL REFERENCES runs(run_id),
    operation  TEXT NOT NULL,
    bytes      INTEGER NOT NULL,
    calls      INTEGER NOT NULL,
    gbps       REAL NOT NULL,
    host_ms    REAL NOT NULL,
    PRIMARY KEY (run_id, operation)
);
UPDATE schema_info SET version = 4;
PRAGMA user_version = 4;
