-- Version 4 to 5: the device memory the estimator predicts each cell allocates. Cells recorded
-- before have none.
ALTER TABLE cells ADD COLUMN predicted_alloc_bytes INTEGER;
UPDATE schema_info SET version = 5;
PRAGMA user_version = 5;
